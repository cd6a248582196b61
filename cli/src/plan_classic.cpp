#include "plan_classic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common.hpp"
#include "options.hpp"
#include "table.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/classic_ml.hpp"
#include "trainplan/planner/classic_plan.hpp"

namespace trainplan::cli {
namespace {

const std::vector<std::string> kClassicOnly = {"--rows", "--features", "--rounds", "--max-depth", "--bins",
                                               "--repeat", "--parallel", "--keep-alive", "--max-wait", "--max-run"};
const std::vector<std::string> kGpuOnly = {"--tokens", "--global-batch", "--global-batch-range", "--seq-len", "--max-gpus",
                                           "--micro-batches", "--zero", "--recompute", "--schedules", "--vp", "--cp",
                                           "--dp-algorithms", "--bucket-sizes", "--for", "--calibration", "--simulate-top"};

bool given(const CLI::App* cmd, const std::string& name) {
  const CLI::Option* o = cmd->get_option_no_throw(name);
  return o && o->count() > 0;
}

std::string usd4(double v) { return v < 10 ? fmt::format("${:.4f}", v) : short_usd(v); }
std::string secs(double s) { return fmt::format("{:.1f}", s); }

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> out;
  for (const auto& item : split(text.empty() ? "1,2" : text, ','))
    out.push_back(static_cast<int>(detail::parse_int_flag("--counts", item, 1, 64)));
  return out;
}

std::optional<double> optional_duration(const std::string& text, const std::string& flag) {
  if (text.empty()) return std::nullopt;
  return flag_positive_quantity(flag, text, units::Dimension::duration);
}

using Row = planner::ClassicRow;

// " *" beside a cost whose price (SageMaker on-demand, or spot with `spot`) rests on a source the
// catalog marks unverified; print_price_notes says which.
std::string price_mark(const hw::CpuInstanceType& c, bool spot) {
  return user_catalog().unverified_price_sources(c, spot).empty() ? "" : " *";
}

void print_price_notes(const std::vector<Row>& rows, bool spot, const char* indent) {
  const hw::Catalog& cat = user_catalog();
  std::vector<std::string> seen;
  for (const auto& r : rows) {
    const auto& c = *r.instance;
    const auto ids = cat.unverified_price_sources(c, spot);
    if (ids.empty() || std::find(seen.begin(), seen.end(), c.name) != seen.end()) continue;
    seen.push_back(c.name);
    std::string refs;
    for (const auto& id : ids) refs += fmt::format("{}{} ({})", refs.empty() ? "" : ", ", id, cat.source(id).date);
    const bool estimated = spot ? c.prices.spot_estimated : c.prices.sagemaker_estimated;
    std::printf("%s* %s: the %s price%s rests on unverified sources; check it on AWS's pricing pages\n"
                "%s  (%s; `trainplan catalog %s` describes them)\n",
                indent, r.job.instance.c_str(), spot ? "managed spot" : "SageMaker on-demand", estimated ? " (estimated)" : "",
                indent, refs.c_str(), c.name.c_str());
  }
}

void print_comparison(const std::vector<Row>& rows) {
  Table t({"instance", ">count", ">wall", ">billable s", ">per instance", ">cost", ">wall vs 1", ">cost vs 1", ">training",
           ">memory/instance"});
  const planner::ClassicJob* base = nullptr;
  for (const auto& r : rows) {
    const auto& j = r.job;
    if (j.count == 1) base = &r.job;  // the row each instance type's other counts compare with
    const bool same = base && base->instance == j.instance;
    t.add({j.instance, std::to_string(j.count), units::format_duration(j.wall_s), secs(j.billed_s_total),
           secs(j.billed_s_per_instance), usd4(j.cost_usd) + price_mark(*r.instance, false), same ? fmt::format("{:.2f}x", j.wall_s / base->wall_s) : "-",
           same ? fmt::format("{:.2f}x", j.cost_usd / base->cost_usd) : "-", units::format_duration(j.phases.training_s),
           memory_of(j.memory_bytes_per_instance, j.usable_memory_bytes) + (j.fits_memory ? "" : " (!)")});
  }
  std::fputs(t.render().c_str(), stdout);
  print_price_notes(rows, false, "");
}

// One column per (label, job).
void print_phases(const std::vector<std::pair<std::string, const planner::ClassicJob*>>& columns) {
  std::vector<std::string> head = {"phase (seconds)", "billed"};
  for (const auto& [label, job] : columns) head.push_back(">" + label);
  Table t(head);
  for (const auto& phase : planner::job_phases()) {
    std::vector<std::string> row = {phase.name, phase.billed ? "yes" : "no"};
    for (const auto& [label, job] : columns) row.push_back(secs(job->phases.*phase.seconds));
    t.add(row);
  }
  std::vector<std::string> total = {"wall (per instance)", ""};
  for (const auto& [label, job] : columns) total.push_back(secs(job->wall_s));
  t.add(total);
  std::fputs(t.render("  ").c_str(), stdout);
}

void print_phases(const std::vector<Row>& rows) {
  std::vector<std::pair<std::string, const planner::ClassicJob*>> columns;
  for (const auto& r : rows) columns.emplace_back(fmt::format("{} x{}", r.job.instance, r.job.count), &r.job);
  print_phases(columns);
}

void print_break_even(const planner::XgboostSpec& spec, const std::vector<Row>& rows) {
  for (const auto& r : rows) {
    if (r.job.count == 1) continue;
    if (!r.break_even) {
      std::printf("  %s: %d instances never finish sooner than 1\n", r.job.instance.c_str(), r.job.count);
      continue;
    }
    const planner::BreakEven& be = *r.break_even;
    std::printf("  %s: %d instances finish sooner than 1 above %s rows (%s now); there each job takes %s and bills %s vs %s "
                "on one%s\n",
                r.job.instance.c_str(), r.job.count, units::format_count(be.rows).c_str(),
                units::format_count(static_cast<double>(spec.rows)).c_str(), units::format_duration(be.many.wall_s).c_str(),
                usd4(be.many.cost_usd).c_str(), usd4(be.one.cost_usd).c_str(),
                be.one.fits_memory ? "" : "; one instance cannot hold that many rows");
  }
  std::printf("  More instances never bill less: each one pays the fixed phases (input, image, algorithm start, upload)\n"
              "  again, and the histogram all-reduce on top.\n");
}

void print_sweep(const std::vector<Row>& rows, const planner::SweepRequest& req) {
  std::printf("\nTuning sweep: %lld jobs, %lld at a time%s\n", static_cast<long long>(req.repeat),
              static_cast<long long>(req.parallel),
              req.keep_alive_s > 0 ? fmt::format(", warm pools kept alive {}", units::format_duration(req.keep_alive_s)).c_str()
                                   : " (no warm pool; --keep-alive keeps one)");
  Table t({"instance", ">count", ">waves", ">wall", ">billable s", ">cost", ">warm starts", ">keep-alive billed s",
           ">wall without pool", ">cost without pool"});
  for (const auto& r : rows) {
    const auto& s = *r.sweep;
    t.add({r.job.instance, std::to_string(r.job.count), std::to_string(s.waves), units::format_duration(s.wall_s),
           secs(s.billed_s), usd4(s.cost_usd) + price_mark(*r.instance, false), std::to_string(s.warm_starts), secs(s.keep_alive_billed_s),
           units::format_duration(s.cold_wall_s), usd4(s.cold_cost_usd) + price_mark(*r.instance, false)});
  }
  std::fputs(t.render("  ").c_str(), stdout);
  std::printf("  A warm pool reuse skips provisioning and the image download (a %s warm start instead); each pool is\n"
              "  billed while it waits, up to its keep-alive after the slot's last job.\n",
              units::format_duration(sim::LifecycleFacts::builtin().sagemaker_warm_pool_start_s).c_str());
}

void print_spot(const std::vector<Row>& rows, const planner::SpotRequest& req) {
  std::printf("\nManaged spot (%zu Monte Carlo runs%s%s):\n", req.runs,
              req.max_wait_s ? fmt::format(", max_wait {}", units::format_duration(*req.max_wait_s)).c_str() : "",
              req.max_run_s ? fmt::format(", max_run {}", units::format_duration(*req.max_run_s)).c_str() : "");
  Table t({"instance", ">count", ">spot $/h", ">wall mean", ">wall p90", ">cost mean", ">on-demand cost", ">interruptions",
           ">P(> max_wait)"});
  std::vector<std::string> notes;
  for (const auto& r : rows) {
    const auto& s = *r.spot;
    const auto& mc = s.monte_carlo;
    t.add({r.job.instance, std::to_string(r.job.count), fmt::format("{:.4f}", s.spot_price_usd_per_hour) + price_mark(*r.instance, true),
           units::format_duration(mc.time_s.mean), units::format_duration(mc.time_s.p90), usd4(mc.cost_usd.mean),
           usd4(r.job.cost_usd), fmt::format("{:.3f}", mc.interruptions.mean),
           mc.p_exceed_max_wait ? percent(*mc.p_exceed_max_wait) : "-"});
    if (notes.empty()) {
      notes = s.assumptions;
      notes.insert(notes.begin(), "spot model: " + s.model);
    }
  }
  std::fputs(t.render("  ").c_str(), stdout);
  print_price_notes(rows, true, "  ");
  std::printf("  A job still running at max_wait (waiting for capacity included) fails: P(> max_wait) is how often.\n");
  for (const auto& n : notes) std::printf("  note: %s\n", n.c_str());
}

}  // namespace

bool is_classic_model(const std::string& model) { return model == "xgboost"; }

ClassicObjective classic_objective(const planner::SearchOptions& search) {
  ClassicObjective o{planner::effective_objective(search)};
  if (!search.deadline.empty()) o.deadline_s = flag_positive_quantity("--deadline", search.deadline, units::Dimension::duration);
  std::string budget = search.budget;
  if (!budget.empty() && budget.front() == '$') budget.erase(0, 1);
  if (!budget.empty()) o.budget_usd = flag_positive_quantity("--budget", budget, units::Dimension::count);
  if (o.objective == "cost-under-deadline" && search.deadline.empty())
    throw Error("needs --deadline").at("--objective").hint("e.g. --deadline 10min");
  if (o.objective == "time-under-budget" && search.budget.empty())
    throw Error("needs --budget").at("--objective").hint("e.g. --budget 0.01");
  return o;
}

void add_classic_options(CLI::App* cmd, ClassicArgs& a, bool for_report) {
  add_int(cmd, "--rows", a.rows, 1, 1'000'000'000'000, "xgboost: training rows");
  add_int(cmd, "--features", a.features, 1, 1'000'000, "xgboost: feature columns (without the label)");
  add_int(cmd, "--rounds", a.rounds, 1, 1'000'000, "xgboost: boosting rounds (num_round)");
  add_int(cmd, "--max-depth", a.max_depth, 1, 20, "xgboost: tree depth (XGBoost's default 6)");
  add_int(cmd, "--bins", a.bins, 2, 65536, "xgboost: histogram bins, max_bin (XGBoost's default 256)");
  const std::string who = for_report ? "SageMaker jobs" : "xgboost";
  add_int(cmd, "--repeat", a.repeat, 1, 1'000'000, who + ": a sweep of this many jobs (hyperparameter tuning)");
  add_int(cmd, "--parallel", a.parallel, 1, 1'000'000, who + ": jobs of the sweep running at once");
  cmd->add_option("--keep-alive", a.keep_alive, who + ": SageMaker warm pool keep-alive for the sweep, e.g. 10min (at most 1h)");
  cmd->add_option("--max-wait", a.max_wait, who + (for_report ? ": managed spot's max_wait, e.g. 1h" : " with --purchase spot: SageMaker max_wait, e.g. 1h"));
  cmd->add_option("--max-run", a.max_run, who + (for_report ? ": managed spot's max_run, e.g. 30min" : " with --purchase spot: SageMaker max_run, e.g. 30min"));
}

std::string classic_option_given(const CLI::App* cmd) {
  for (const auto& name : kClassicOnly)
    if (given(cmd, name)) return name;
  return "";
}

planner::ClassicRequest classic_request(const planner::SearchOptions& search, const ClassicArgs& a, const CLI::App* cmd) {
  for (const auto& name : kGpuOnly)
    if (given(cmd, name))
      throw Error(fmt::format("does not apply to --model {}", search.model))
          .at(name)
          .hint("an XGBoost job is sized by --rows, --features, --rounds, --max-depth and --bins");
  if (given(cmd, "--platform") && search.platform != "sagemaker")
    throw Error("classic ML jobs are modelled as SageMaker training jobs").at("--platform").hint("drop it, or say sagemaker");
  if (given(cmd, "--warm-pool"))
    throw Error("a warm pool is reused by a sweep's later jobs").at("--warm-pool").hint("use --repeat N --keep-alive T");
  if (a.rows == 0) throw Error("is required with --model xgboost").at("--rows").hint("the training table's rows, e.g. --rows 892");
  if (a.features == 0)
    throw Error("is required with --model xgboost").at("--features").hint("feature columns without the label, e.g. --features 8");
  const bool spot = search.spot || search.purchase == "spot" || search.purchase == "both";
  if ((!a.max_wait.empty() || !a.max_run.empty()) && !spot)
    throw Error("applies to managed spot only").at(!a.max_wait.empty() ? "--max-wait" : "--max-run").hint("add --purchase spot");
  if ((given(cmd, "--parallel") || !a.keep_alive.empty()) && a.repeat == 0)
    throw Error("describes a sweep").at(given(cmd, "--parallel") ? "--parallel" : "--keep-alive").hint("add --repeat N");

  planner::ClassicRequest req;
  req.spec = {.rows = a.rows, .features = a.features, .rounds = a.rounds, .max_depth = static_cast<int>(a.max_depth),
              .bins = static_cast<int>(a.bins)};
  planner::check(req.spec);
  const hw::Catalog& cat = user_catalog();
  for (const auto& name : split(search.instances.empty() ? "ml.m5.large" : search.instances, ','))
    req.instances.push_back(
        &at_flag("--instances", [&]() -> const hw::CpuInstanceType& { return cat.cpu_instance(name); }));
  req.counts = parse_counts(search.counts);
  if (a.repeat > 0)
    req.sweep = planner::SweepRequest{
        .repeat = a.repeat, .parallel = a.parallel,
        .keep_alive_s = a.keep_alive.empty() ? 0.0 : flag_quantity("--keep-alive", a.keep_alive, units::Dimension::duration)};
  if (spot)
    req.spot = planner::SpotRequest{.max_wait_s = optional_duration(a.max_wait, "--max-wait"),
                                    .max_run_s = optional_duration(a.max_run, "--max-run"), .runs = search.spot_runs, .seed = search.seed};
  return req;
}

void run_classic_plan(const planner::SearchOptions& search, const ClassicArgs& a, const CLI::App* cmd, const std::string& json_out,
                      const std::string& output) {
  const planner::ClassicRequest req = classic_request(search, a, cmd);
  const planner::XgboostSpec& spec = req.spec;
  // Everything that can refuse the request runs before anything is printed.
  const std::vector<Row> rows = planner::compare_classic(req);
  const ClassicObjective goal = classic_objective(search);
  const planner::ClassicRow& best = planner::best_classic_row(rows, goal.objective, goal.deadline_s, goal.budget_usd);

  std::printf("trainplan plan: xgboost (tree_method hist, max_depth %d, %d bins), %s rows x %lld features, %lld rounds\n",
              spec.max_depth, spec.bins, units::format_count(static_cast<double>(spec.rows)).c_str(),
              static_cast<long long>(spec.features), static_cast<long long>(spec.rounds));
  std::printf("SageMaker training jobs, on-demand, us-east-1; rows sharded over the instances (ShardedByS3Key)\n");
  if (const std::string& region = user_catalog().region(); !region.empty() && region != hw::kCatalogRegion)
    std::printf("note: --region %s: the catalog has CPU instance prices for us-east-1 only; these are us-east-1's\n", region.c_str());
  std::printf("\n");
  print_comparison(rows);
  std::printf("\nWhere the time goes, per instance (all instances run the phases in parallel; billed phases are billed\n"
              "on every instance):\n");
  print_phases(rows);
  std::printf("\nWhen more instances pay (same features, rounds, depth and bins):\n");
  print_break_even(spec, rows);
  for (const auto& r : rows)
    if (!r.job.fits_memory)
      std::printf("note: %s x%d: the data (%s per instance) exceeds %s usable memory\n", r.job.instance.c_str(), r.job.count,
                  units::format_bytes(r.job.memory_bytes_per_instance).c_str(), units::format_bytes(r.job.usable_memory_bytes).c_str());

  if (req.sweep) print_sweep(rows, *req.sweep);
  if (req.spot) print_spot(rows, *req.spot);
  std::printf("\nStart-up phases: durations measured in published SageMaker logs of built-in XGBoost jobs (not the jobs\n"
              "compared here); `trainplan plan --model xgboost ... --json FILE` lists every constant with its source.\n");

  if (!output.empty()) {
    const plan::Purchase purchase = search.purchase == "spot" || search.spot ? plan::Purchase::spot : plan::Purchase::on_demand;
    json::write_file(output, planner::classic_plan_json(spec, best, purchase));
    std::printf("\nbest job (%s, objective %s) written to %s: trainplan job %s\n",
                fmt::format("{} x{}", best.job.instance, best.job.count).c_str(), goal.objective.c_str(), output.c_str(),
                output.c_str());
  }
  if (!json_out.empty()) {
    json::Json doc;
    doc["model"] = {{"kind", "xgboost"}, {"rows", spec.rows}, {"features", spec.features}, {"rounds", spec.rounds},
                    {"max_depth", spec.max_depth}, {"bins", spec.bins}};
    doc["jobs"] = json::Json::array();
    for (const auto& r : rows) {
      json::Json j = planner::to_json(r.job);
      if (r.job.count > 1) j["break_even_rows"] = r.break_even ? json::Json(r.break_even->rows) : json::Json(nullptr);
      if (r.sweep) j["sweep"] = planner::to_json(*r.sweep);
      if (r.spot) j["spot"] = {{"spot_usd_per_hour", r.spot->spot_price_usd_per_hour}, {"monte_carlo", sim::to_json(r.spot->monte_carlo)}};
      doc["jobs"].push_back(j);
    }
    doc["constants"] = json::Json::array();
    for (const auto& c : planner::xgboost_constants())
      doc["constants"].push_back({{"name", c.name}, {"value", c.value}, {"kind", c.kind}, {"source", c.source}});
    json::write_file(json_out, doc);
    std::printf("written to %s\n", json_out.c_str());
  }
}

void run_classic_job(const std::string& file, const json::Json& doc, const planner::JobRequest& request, const CLI::App* cmd,
                     bool json_output) {
  static const std::vector<std::string> kGpuJobOnly = {
      "--step-time", "--calibration", "--tokens", "--samples", "--epochs", "--data-input", "--dataset-size", "--sample-size",
      "--checkpoint-storage", "--fsx-deployment", "--fsx-size", "--ebs-throughput", "--checkpoint-interval", "--eval-every",
      "--eval-time", "--deadline", "--trace", "--no-hardware-failures", "--write-plan"};
  for (const auto& name : kGpuJobOnly)
    if (given(cmd, name))
      throw Error(fmt::format("does not apply to the XGBoost job {}", file))
          .at(name)
          .hint("a classic job takes --purchase, --warm-pool, --repeat, --parallel, --keep-alive, --max-wait, --max-run, --runs, "
                "--seed and --json");
  if (given(cmd, "--platform") && request.platform != "sagemaker")
    throw Error("classic ML jobs are modelled as SageMaker training jobs").at("--platform").hint("drop it, or say sagemaker");
  const planner::ClassicPlan p = planner::parse_classic_plan(doc, file);
  const hw::Catalog& cat = user_catalog();
  at_flag(file, [&]() -> const hw::CpuInstanceType& { return cat.cpu_instance(p.instance_type); });
  const planner::ClassicJobAnalysis an = planner::analyze_classic_job(p, cat, request, given(cmd, "--purchase"));
  if (json_output) {
    std::fputs(json::dump(planner::to_json(an, file)).c_str(), stdout);
    return;
  }
  const planner::XgboostSpec& spec = p.spec;
  const planner::ClassicJob& j = an.job;
  std::printf("trainplan job: %s: xgboost (max_depth %d, %d bins), %s rows x %lld features, %lld rounds on %d x %s, %s on "
              "sagemaker%s\n\n",
              file.c_str(), spec.max_depth, spec.bins, units::format_count(static_cast<double>(spec.rows)).c_str(),
              static_cast<long long>(spec.features), static_cast<long long>(spec.rounds), j.count, j.instance.c_str(),
              an.spot ? "spot" : "on-demand", j.warm_start ? ", first start on a warm pool" : "");
  std::vector<std::pair<std::string, const planner::ClassicJob*>> columns = {{j.warm_start ? "warm pool" : "this job", &j}};
  if (j.warm_start) columns.emplace_back("cold start", &an.cold);
  print_phases(columns);
  const Row row{.instance = an.instance, .job = j, .break_even = std::nullopt, .sweep = an.sweep, .spot = an.spot_result};
  std::printf("wall %s; billed %s s per instance x %d = %s s; %s at %s per instance-hour (SageMaker on-demand)\n",
              units::format_duration(j.wall_s).c_str(), secs(j.billed_s_per_instance).c_str(), j.count, secs(j.billed_s_total).c_str(),
              (usd4(j.cost_usd) + price_mark(*an.instance, false)).c_str(), usd4(j.price_usd_per_hour).c_str());
  print_price_notes({row}, false, "");
  if (j.warm_start)
    std::printf("the warm pool saves %s of wall time and %s billed s per instance against a cold start\n",
                units::format_duration(an.cold.wall_s - j.wall_s).c_str(),
                secs(an.cold.billed_s_per_instance - j.billed_s_per_instance).c_str());
  if (!j.fits_memory)
    std::printf("note: the data (%s per instance) exceeds %s usable memory\n", units::format_bytes(j.memory_bytes_per_instance).c_str(),
                units::format_bytes(j.usable_memory_bytes).c_str());
  if (an.spot_result) print_spot({row}, an.spot_request);
  if (an.sweep) print_sweep({row}, an.sweep_request);
  if (!an.assumptions.empty()) {
    std::printf("\nassumptions:\n");
    for (const auto& n : an.assumptions) std::printf("  - %s\n", n.c_str());
  }
}

}  // namespace trainplan::cli
