// Classic ML as the commands see it (classic_plan.hpp): the comparison of plan and report, the
// job file, and the whole job of a job file.
#include "trainplan/planner/classic_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "trainplan/core/error.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::planner {
namespace {

constexpr const char* kClassicModel = "xgboost";

std::optional<BreakEven> break_even_of(const XgboostSpec& spec, const hw::CpuInstanceType& instance, int count) {
  const auto rows = break_even_rows(spec, instance, count);
  if (!rows) return std::nullopt;
  XgboostSpec at = spec;
  at.rows = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(*rows)));
  return BreakEven{*rows, xgboost_job(at, instance, count), xgboost_job(at, instance, 1)};
}

std::optional<double> optional_duration(const std::string& text, const char* flag) {
  if (text.empty()) return std::nullopt;
  return flag_positive_quantity(flag, text, units::Dimension::duration);
}

}  // namespace

const std::vector<PhaseInfo>& job_phases() {
  using P = JobPhases;
  static const std::vector<PhaseInfo> kPhases = {
      {"starting", false, &P::starting_s},          {"preparing instances", false, &P::preparing_s},
      {"input download", true, &P::input_download_s}, {"image download", true, &P::image_download_s},
      {"algorithm start", true, &P::algorithm_start_s}, {"training", true, &P::training_s},
      {"model upload", true, &P::upload_s}};
  return kPhases;
}

std::vector<ClassicRow> compare_classic(const ClassicRequest& req) {
  check(req.spec);
  std::vector<ClassicRow> rows;
  for (const hw::CpuInstanceType* inst : req.instances)
    for (int n : req.counts) {
      ClassicRow r;
      r.instance = inst;
      r.job = xgboost_job(req.spec, *inst, n);
      if (n > 1) r.break_even = break_even_of(req.spec, *inst, n);
      if (req.sweep) r.sweep = sweep(req.spec, *inst, n, *req.sweep);
      if (req.spot) r.spot = at_flag("--max-wait", [&] { return spot_job(req.spec, *inst, n, *req.spot); });
      rows.push_back(std::move(r));
    }
  return rows;
}

const ClassicRow& best_classic_row(const std::vector<ClassicRow>& rows, const std::string& objective, double deadline_s,
                                   double budget_usd) {
  TP_ASSERT(!rows.empty());
  // Keys compared lexicographically, smaller first; rows that do not fit memory always last.
  auto key = [&](const ClassicRow& r) {
    const ClassicJob& j = r.job;
    const bool misfit = !j.fits_memory;
    if (objective == "cost") return std::make_tuple(misfit, false, j.cost_usd, j.wall_s);
    if (objective == "cost-under-deadline") {
      const bool late = j.wall_s > deadline_s;  // none meets it: the fastest
      return late ? std::make_tuple(misfit, true, j.wall_s, j.cost_usd) : std::make_tuple(misfit, false, j.cost_usd, j.wall_s);
    }
    if (objective == "time-under-budget") {
      const bool over = j.cost_usd > budget_usd;  // none within it: the cheapest
      return over ? std::make_tuple(misfit, true, j.cost_usd, j.wall_s) : std::make_tuple(misfit, false, j.wall_s, j.cost_usd);
    }
    return std::make_tuple(misfit, false, j.wall_s, j.cost_usd);
  };
  return *std::min_element(rows.begin(), rows.end(), [&](const ClassicRow& a, const ClassicRow& b) { return key(a) < key(b); });
}

bool is_classic_plan(const json::Json& doc) {
  return doc.is_object() && doc.contains("model") && doc["model"].is_string() && doc["model"].get<std::string>() == kClassicModel;
}

ClassicPlan parse_classic_plan(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  if (!r.is_object()) throw r.error("a job file must be a JSON object").hint("see planner/README.md, \"Classic ML job files\"");
  ClassicPlan p;
  if (r.field("schema_version").as_positive_int() != plan::kSchemaVersion)
    throw r.field("schema_version").error("unsupported schema_version").hint(fmt::format("this trainplan reads schema_version {}", plan::kSchemaVersion));
  if (r.field("model").as_string() != kClassicModel)
    throw r.field("model").error("not a classic ML job").hint("classic job files have \"model\": \"xgboost\"");
  auto x = r.field("xgboost");
  p.spec.rows = x.field("rows").as_positive_int(1'000'000'000'000);
  p.spec.features = x.field("features").as_positive_int(1'000'000);
  if (auto f = x.optional_field("rounds")) p.spec.rounds = f->as_positive_int(1'000'000);
  if (auto f = x.optional_field("max_depth")) p.spec.max_depth = static_cast<int>(f->as_positive_int(20));
  if (auto f = x.optional_field("bins")) p.spec.bins = static_cast<int>(f->as_int(2, 65536));
  x.finish();
  auto c = r.field("cluster");
  p.instance_type = c.field("instance_type").as_string();
  p.count = static_cast<int>(c.field("count").as_positive_int(64));
  c.finish();
  if (auto t = r.optional_field("training")) {
    if (auto f = t->optional_field("purchase"))
      p.purchase = f->as_choice({"on-demand", "spot"}) == "spot" ? plan::Purchase::spot : plan::Purchase::on_demand;
    if (auto f = t->optional_field("platform")) (void)f->as_choice({"sagemaker"});
    t->finish();
  }
  if (auto f = r.optional_field("predicted")) p.predicted = f->value();
  r.ignore("comment");
  r.finish();
  return p;
}

json::Json classic_plan_json(const XgboostSpec& spec, const ClassicRow& row, plan::Purchase purchase) {
  json::Json j;
  j["schema_version"] = plan::kSchemaVersion;
  j["model"] = kClassicModel;
  j["xgboost"] = {{"rows", spec.rows}, {"features", spec.features}, {"rounds", spec.rounds}, {"max_depth", spec.max_depth},
                  {"bins", spec.bins}};
  j["cluster"] = {{"instance_type", row.job.instance}, {"count", row.job.count}};
  j["training"] = {{"purchase", std::string(plan::purchase_name(purchase))}, {"platform", "sagemaker"}};
  j["predicted"] = to_json(row.job);
  return j;
}

ClassicJobAnalysis analyze_classic_job(const ClassicPlan& p, const hw::Catalog& catalog, const JobRequest& a, bool purchase_given) {
  ClassicJobAnalysis out;
  out.plan = p;
  out.instance = &catalog.cpu_instance(p.instance_type);
  out.spot = purchase_given ? flag_choice("--purchase", a.purchase, {"on-demand", "spot"}) == "spot"
                            : p.purchase == plan::Purchase::spot;
  flag_in_range("--repeat", a.repeat, 0, 1'000'000);
  flag_in_range("--parallel", a.parallel, 1, 1'000'000);
  flag_in_range("--runs", static_cast<int64_t>(a.runs), 1, limits::kMaxRuns);
  if (a.repeat == 0 && (a.parallel != 1 || !a.keep_alive.empty()))
    throw Error("describes a sweep").at(a.parallel != 1 ? "--parallel" : "--keep-alive").hint("add --repeat N");
  if (!out.spot && (!a.max_wait.empty() || !a.max_run.empty()))
    throw Error("applies to managed spot only").at(!a.max_wait.empty() ? "--max-wait" : "--max-run").hint("add --purchase spot");
  if (out.spot && a.repeat > 0)
    throw Error("a sweep is costed on-demand (uninterrupted jobs)").at("--repeat").hint("drop --purchase spot, or --repeat");
  out.cold = xgboost_job(p.spec, *out.instance, p.count, false);
  out.job = a.warm_pool ? xgboost_job(p.spec, *out.instance, p.count, true) : out.cold;
  if (a.warm_pool)
    out.assumptions.push_back(fmt::format("SageMaker warm pool: the job starts on a pool another job left ({} warm start instead "
                                          "of provisioning and the image download)",
                                          units::format_duration(sim::LifecycleFacts::builtin().sagemaker_warm_pool_start_s)));
  if (out.spot) {
    out.spot_request = {.max_wait_s = optional_duration(a.max_wait, "--max-wait"),
                         .max_run_s = optional_duration(a.max_run, "--max-run"),
                         .runs = a.runs,
                         .seed = a.seed,
                         .warm_start = a.warm_pool};
    out.spot_result = at_flag("--max-wait", [&] { return spot_job(p.spec, *out.instance, p.count, out.spot_request); });
  }
  if (a.repeat > 0) {
    out.sweep_request = {.repeat = a.repeat, .parallel = a.parallel,
                          .keep_alive_s = a.keep_alive.empty() ? 0.0 : flag_quantity("--keep-alive", a.keep_alive, units::Dimension::duration)};
    out.sweep = sweep(p.spec, *out.instance, p.count, out.sweep_request);
  }
  return out;
}

json::Json to_json(const ClassicJobAnalysis& a, const std::string& plan_name) {
  json::Json j;
  j["plan"] = plan_name;
  j["model"] = {{"kind", kClassicModel}, {"rows", a.plan.spec.rows}, {"features", a.plan.spec.features},
                {"rounds", a.plan.spec.rounds}, {"max_depth", a.plan.spec.max_depth}, {"bins", a.plan.spec.bins}};
  j["purchase"] = a.spot ? "spot" : "on-demand";
  j["job"] = to_json(a.job);
  if (a.job.warm_start) j["cold_start"] = to_json(a.cold);
  if (a.spot_result)
    j["spot"] = {{"spot_usd_per_hour", a.spot_result->spot_price_usd_per_hour}, {"model", a.spot_result->model},
                 {"assumptions", a.spot_result->assumptions}, {"monte_carlo", sim::to_json(a.spot_result->monte_carlo)}};
  if (a.sweep) j["sweep"] = to_json(*a.sweep);
  j["assumptions"] = a.assumptions;
  return j;
}

}  // namespace trainplan::planner
