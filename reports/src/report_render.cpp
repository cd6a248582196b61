// Rendering a report: the content is built once as a list of blocks (headings, paragraphs,
// tables, charts), then written as Markdown (charts left out) or as HTML (charts inline).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "report_doc.hpp"
#include "report_internal.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/reports/report.hpp"
#include "trainplan/simulator/job_builder.hpp"

namespace trainplan::reports {
namespace {

using planner::Candidate;
using planner::StepEstimate;
using report_detail::comm_part;
using report_detail::kNumParts;
using report_detail::Part;
using report_detail::part_info;
using report_detail::Block;
using report_detail::Doc;
using report_detail::Table;
using report_detail::html_of;
using report_detail::markdown_of;

// ---- number formatting -----------------------------------------------------------------------

std::string dur(double s) { return s == 0 ? "0" : units::format_duration(s); }
std::string usd(double v) { return units::format_usd(v); }
// No price for the purchase option: "no price", never a free-looking figure.
std::string usd_or(const std::optional<double>& v) { return v ? usd(*v) : "no price"; }
std::string pct(double f) { return fmt::format("{:.0f}%", f * 100.0); }
std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / 1073741824.0); }
std::string per_hour(const std::optional<double>& v) { return v ? fmt::format("${:.3f}", *v) : "no price"; }

// "dp/tp/pp", with context parallelism, interleaving, sequence parallelism and a data-parallel
// algorithm other than ring when the plan has them: "4/2/2 cp 2 vp 2 sp tree".
std::string split_of(const plan::Plan& p) {
  std::string s = fmt::format("{}/{}/{}", p.dp, p.tp, p.pp);
  if (p.cp > 1) s += fmt::format(" cp {}", p.cp);
  if (p.vp > 1) s += fmt::format(" vp {}", p.vp);
  if (p.sequence_parallel) s += " sp";
  if (p.dp_cp() > 1 && p.dp_algorithm != plan::DpAlgorithm::ring) s += fmt::format(" {}", plan::dp_algorithm_name(p.dp_algorithm));
  return s;
}

std::string plural(size_t n, const std::string& one, const std::string& many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// Where a candidate's step time comes from: the search simulates its best `simulate_top`.
std::string source_of(const Candidate& c) { return c.simulated ? "simulated" : "estimate"; }

std::string instances_of(const plan::Plan& p) { return fmt::format("{} x {}", p.instance_count, p.instance_type); }

std::string recomputation(plan::Recompute r) {
  return r == plan::Recompute::none ? "no recomputation" : fmt::format("{} recomputation", plan::recompute_name(r));
}

std::string plan_summary(const plan::Plan& p) {
  std::string s = fmt::format("{} ({} GPUs), dp/tp/pp {}/{}/{}", instances_of(p), p.world_size(), p.dp, p.tp, p.pp);
  if (p.cp > 1) s += fmt::format(", context parallel {}", p.cp);
  if (p.vp > 1) s += fmt::format(" with {} virtual stages", p.vp);
  if (p.sequence_parallel) s += ", sequence parallel";
  s += fmt::format(", ZeRO-{}, micro-batch {} x {}, {}, {} schedule", p.zero_stage, p.micro_batch, p.num_micro_batches,
                   recomputation(p.recompute), plan::schedule_name(p.schedule));
  if (p.dp_cp() > 1)
    s += fmt::format(", {} gradient reduction, {} MB buckets", plan::dp_algorithm_name(p.dp_algorithm), p.bucket_size_bytes / 1e6);
  if (p.precision) s += fmt::format(", {}", precision_name(*p.precision));
  return s;
}

// A time unit that suits values up to `max_s`: (name, seconds per unit).
std::pair<std::string, double> time_unit(double max_s) {
  if (max_s < 2 * 3600.0) return {"min", 60.0};
  if (max_s < 3 * 86400.0) return {"h", 3600.0};
  return {"days", 86400.0};
}

svg::Format dollars() {
  return [](double v) { return "$" + svg::compact_number(v); };
}

// A log axis when the data span more than a factor 30.
svg::Scale scale_for(const std::vector<double>& values) {
  double lo = 1e300, hi = 0;
  for (double v : values)
    if (v > 0 && std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  return hi > 30 * lo ? svg::Scale::log10 : svg::Scale::linear;
}

// ---- step-time parts ----------------------------------------------------------------------------

using Parts = std::array<double, kNumParts>;

Parts estimate_parts(const ReportPlan& rp) {
  const StepEstimate& e = rp.candidate.step;
  Parts p{};
  p[static_cast<size_t>(Part::compute)] = e.compute_s - e.recompute_s;
  p[static_cast<size_t>(Part::recompute)] = e.recompute_s;
  for (size_t k = 0; k < e.exposed_comm_by_purpose_s.size(); ++k)
    p[static_cast<size_t>(comm_part(static_cast<plan::CommPurpose>(k)))] += e.exposed_comm_by_purpose_s[k];
  p[static_cast<size_t>(Part::bubble)] = e.bubble_s;
  p[static_cast<size_t>(Part::optimizer)] = e.optimizer_s;
  double sum = 0;
  for (double v : p) sum += v;
  // Whatever the estimate's step time holds beyond its named parts.
  p[static_cast<size_t>(Part::other)] += std::max(0.0, e.step_time_s - sum);
  p[static_cast<size_t>(Part::io_stall)] = rp.io_stall_per_step_s;
  return p;
}

Parts simulated_parts(const SimulatedTimeline& s, double input_time_per_step_s) {
  const sim::Breakdown& b = s.breakdown;
  Parts p{};
  p[static_cast<size_t>(Part::compute)] = b.compute_s - s.recompute_s;
  p[static_cast<size_t>(Part::recompute)] = s.recompute_s;
  p[static_cast<size_t>(Part::optimizer)] = b.optimizer_s;
  for (size_t k = 0; k < b.exposed_comm_s.size(); ++k)
    p[static_cast<size_t>(comm_part(static_cast<plan::CommPurpose>(k)))] += b.exposed_comm_s[k];
  p[static_cast<size_t>(Part::bubble)] = b.bubble_s;
  p[static_cast<size_t>(Part::other)] += b.other_s;
  p[static_cast<size_t>(Part::io_stall)] = std::max(0.0, input_time_per_step_s - s.step_time_s);
  return p;
}

// The parts shown in breakdown tables and bars (forward/backward are Gantt-only).
std::vector<Part> breakdown_parts(const std::vector<Parts>& rows) {
  std::vector<Part> out;
  for (size_t k = 0; k < kNumParts; ++k) {
    const Part part = static_cast<Part>(k);
    if (part == Part::forward || part == Part::backward) continue;
    const bool any = std::any_of(rows.begin(), rows.end(), [&](const Parts& r) { return r[k] > 0; });
    if (any || part == Part::compute) out.push_back(part);
  }
  return out;
}

// ---- sections ------------------------------------------------------------------------------------

// The work as given: tokens, or samples x epochs (with the tokens for sequence models).
std::string work_of(const Report& r) {
  if (!(r.epochs > 0)) return units::format_count(r.tokens) + " tokens";
  std::string s = fmt::format("{} samples x {:g} epochs", units::format_count(r.samples_per_epoch), r.epochs);
  if (r.tokens != r.samples_per_epoch * r.epochs) s += fmt::format(" ({} tokens)", units::format_count(r.tokens));
  return s;
}

void intro(Doc& d, const Report& r) {
  const ReportPlan& best = r.plans.front();
  if (r.single_plan) {
    d.title(fmt::format("trainplan report: {} on {}", r.model, instances_of(best.candidate.plan)));
  } else {
    d.title(fmt::format("trainplan report: {}, {}", r.model, work_of(r)));
    std::string dropped;
    for (const auto& [why, n] : r.dropped) dropped += fmt::format("; dropped {} ({})", n, why);
    d.paragraph(fmt::format("Search over {} up to {} GPUs at {} prices, ranked by {}: {} candidate plans{}; {} estimated.",
                            join(r.instance_types, ", "), r.max_gpus, plan::platform_name(r.platform), r.objective,
                            r.enumerated, dropped, r.evaluated));
  }
  const std::string batch = r.seq_len > 0 ? fmt::format("{} x {} tokens", r.global_batch, r.seq_len) : fmt::format("{} samples", r.global_batch);
  d.paragraph(fmt::format("Model {} ({} parameters), global batch {}{}.", r.model, units::format_count(r.parameters), batch,
                          r.tokens > 0 ? (r.epochs > 0 ? fmt::format(", {} of training", work_of(r))
                                                       : fmt::format(", {} training tokens", units::format_count(r.tokens)))
                                       : ""));
  d.markdown_only(fmt::format("Charts: [{0}]({0}) holds this report with its charts.", r.options.html_name));
  d.paragraph(fmt::format(
      "Where the numbers come from: estimate = the planner's analytical step model; simulated = the "
      "discrete-event step simulator; Monte Carlo = {} simulated runs of the whole job (startup, checkpoints, "
      "interruptions, restarts; seed {}).",
      r.options.spot_runs, r.options.seed));
}

void best_plan(Doc& d, const Report& r) {
  const ReportPlan& b = r.plans.front();
  const Candidate& c = b.candidate;
  d.heading(r.single_plan ? "The plan" : "Best plan");
  std::string text = fmt::format("{}: step {} ({}), MFU {}, {} tokens/s (estimate)", plan_summary(c.plan), dur(c.step_time_s()),
                                 source_of(c), pct(c.step.mfu), units::format_count(c.step.tokens_per_s));
  if (r.tokens > 0) {
    text += fmt::format("; {} steps, {} to train ({}), {} on-demand", units::format_count(c.steps), dur(c.time_to_train_s),
                        source_of(c), usd_or(c.cost_on_demand_usd));
    if (r.epochs > 0) text += fmt::format("; {} per epoch over {:g} epochs", dur(c.time_to_train_s / r.epochs), r.epochs);
    if (c.transfer_usd > 0) text += fmt::format(" (of which {} data transfer: traffic between AZs, data from another region)", usd(c.transfer_usd));
    if (b.spot && b.spot->monte_carlo)
      text += fmt::format("; spot {} p50, {} p90 for the whole job (Monte Carlo)", usd(b.spot->monte_carlo->cost_usd.p50),
                          usd(b.spot->monte_carlo->cost_usd.p90));
    if (c.cost_capacity_block_usd)
      text += fmt::format("; EC2 Capacity Block {} (the time to train rounded up to whole days, or weeks past 14 days, "
                          "reserved and paid up front)",
                          usd(*c.cost_capacity_block_usd));
  }
  text += fmt::format(". Peak memory {} of {} per GPU.", gib(c.memory.total_bytes()), gib(c.memory.capacity_bytes));
  d.paragraph(text);
  if (b.io_stall_per_step_s > 0)
    d.paragraph(fmt::format("I/O-BOUND: reading a step's samples takes {} against a {} step; every step stalls {}.",
                            dur(b.input_time_per_step_s), dur(c.step_time_s()), dur(b.io_stall_per_step_s)));
}

void top_plans(Doc& d, const Report& r) {
  d.heading(r.single_plan ? "Summary" : "Top plans");
  Table t{{">#", ">time to train", ">on-demand", ">spot p50", ">spot p90", "instances", ">GPUs", ">dp/tp/pp", ">ZeRO",
           ">micro-batch x count", "recompute", ">memory/GPU", ">MFU"},
          {}};
  for (const auto& rp : r.plans) {
    const auto& c = rp.candidate;
    const auto& p = c.plan;
    const bool mc = rp.spot && rp.spot->monte_carlo;
    t.rows.push_back({std::to_string(rp.position), r.tokens > 0 ? dur(c.time_to_train_s) + (c.simulated ? " (sim)" : "") : "n/a",
                      r.tokens > 0 ? usd_or(c.cost_on_demand_usd) : "n/a", mc ? usd(rp.spot->monte_carlo->cost_usd.p50) : "-",
                      mc ? usd(rp.spot->monte_carlo->cost_usd.p90) : "-", instances_of(p), std::to_string(p.world_size()),
                      split_of(p), std::to_string(p.zero_stage), fmt::format("{} x {}", p.micro_batch, p.num_micro_batches),
                      std::string(plan::recompute_name(p.recompute)),
                      fmt::format("{:.1f}/{:.1f} GiB", c.memory.total_bytes() / 1073741824.0, c.memory.capacity_bytes / 1073741824.0),
                      pct(c.step.mfu)});
  }
  d.table(std::move(t));
  d.paragraph(fmt::format(
      "Time to train and on-demand cost: steps x the step time (compute only), estimated, or simulated where marked "
      "(sim). Spot p50 / p90: Monte Carlo of "
      "the whole job at spot prices, with startup, checkpoints at Young's interval, interruptions and restarts{}. "
      "Memory: the pipeline stage with the most, against the usable GPU memory (estimate).",
      r.single_plan ? "" : fmt::format("; \"-\": not run (only the first {} plans get one) or no spot price",
                                      std::max<size_t>(r.options.spot_plans, 1))));
}

// Instance types drawn as their own series (at most kMaxSeries, so colours stay distinct):
// those of the top plans, then of the Pareto frontier, then the fastest others.
constexpr size_t kMaxSeries = 8;
std::vector<std::string> featured_types(const Report& r) {
  std::vector<std::string> out;
  auto add = [&](const std::string& t) {
    if (out.size() < kMaxSeries && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const auto& rp : r.plans) add(rp.candidate.plan.instance_type);
  for (const auto& sp : r.sizes)
    if (sp.pareto) add(sp.instance_type);
  std::map<std::string, double> fastest;
  for (const auto& sp : r.sizes) {
    auto it = fastest.find(sp.instance_type);
    if (it == fastest.end() || sp.best.time_to_train_s < it->second) fastest[sp.instance_type] = sp.best.time_to_train_s;
  }
  std::vector<std::pair<double, std::string>> by_speed;
  for (const auto& [t, v] : fastest) by_speed.emplace_back(v, t);
  std::sort(by_speed.begin(), by_speed.end());
  for (const auto& [v, t] : by_speed) add(t);
  return out;
}

void cost_vs_time(Doc& d, const Report& r) {
  if (r.sizes.empty()) return;
  d.heading("Cost vs time to train");
  double max_t = 0;
  std::vector<double> ts, cs;
  for (const auto& s : r.sizes) {
    max_t = std::max(max_t, s.best.time_to_train_s);
    ts.push_back(s.best.time_to_train_s);
    if (s.best.cost_on_demand_usd) cs.push_back(*s.best.cost_on_demand_usd);
  }
  const auto [unit, unit_s] = time_unit(max_t);
  std::vector<double> tu;
  for (double t : ts) tu.push_back(t / unit_s);
  const std::vector<std::string> featured = featured_types(r);
  svg::ScatterChart ch;
  ch.frame = {"cost-vs-time", "On-demand cost vs time to train",
              "Each dot is the fastest plan of one instance type and cluster size; the line joins the Pareto-optimal ones "
              "(no other plan is both faster and cheaper).",
              760, 420};
  const bool any_simulated = std::any_of(r.sizes.begin(), r.sizes.end(), [](const SizePoint& sp) { return sp.best.simulated.has_value(); });
  ch.x = {fmt::format("time to train ({}, {})", unit, any_simulated ? "estimate or simulated" : "estimate"), scale_for(tu), {}, {}, {}, false};
  ch.y = {"on-demand cost (USD)", scale_for(cs), dollars(), {}, {}, scale_for(cs) == svg::Scale::linear};
  for (size_t i = 0; i < featured.size(); ++i) ch.series.push_back({featured[i], {}, static_cast<int>(i)});
  svg::Series others{"", {}, 8};
  std::set<std::string> other_types;
  for (const auto& s : r.sizes) {
    if (!s.best.cost_on_demand_usd) continue;
    const svg::Point pt{s.best.time_to_train_s / unit_s, *s.best.cost_on_demand_usd,
                        fmt::format("{} x {} ({} GPUs, {}): {}, {}", s.instances, s.instance_type, s.gpus,
                                    split_of(s.best.plan), dur(s.best.time_to_train_s), usd(*s.best.cost_on_demand_usd))};
    const auto it = std::find(featured.begin(), featured.end(), s.instance_type);
    if (it != featured.end()) {
      ch.series[static_cast<size_t>(it - featured.begin())].points.push_back(pt);
    } else {
      others.points.push_back(pt);
      other_types.insert(s.instance_type);
    }
    if (s.pareto) ch.frontier.points.push_back(pt);
  }
  if (!others.points.empty()) {
    others.name = fmt::format("{} other instance types", other_types.size());
    ch.series.push_back(others);
  }
  ch.frontier.name = "Pareto frontier";
  const Candidate& best = r.plans.front().candidate;
  if (best.cost_on_demand_usd) ch.highlighted.push_back({best.time_to_train_s / unit_s, *best.cost_on_demand_usd, "best (#1)"});
  d.chart(svg::scatter_chart(ch));
  d.paragraph(
      "Points: the fastest evaluated plan of each instance type and cluster size. For one type and size, cost is "
      "proportional to time, so these points hold the Pareto frontier of every evaluated plan. Pareto-optimal plans:");
  Table t{{"instances", ">GPUs", ">time to train", ">on-demand", ">spot (no interruptions)", ">dp/tp/pp", ">MFU"}, {}};
  for (const auto& s : r.sizes)
    if (s.pareto)
      t.rows.push_back({instances_of(s.best.plan), std::to_string(s.gpus), dur(s.best.time_to_train_s),
                        usd_or(s.best.cost_on_demand_usd), usd_or(s.best.cost_spot_usd), split_of(s.best.plan), pct(s.best.step.mfu)});
  d.table(std::move(t));
}

void scaling(Doc& d, const Report& r) {
  if (r.sizes.empty()) return;
  d.heading("Throughput and scaling efficiency");
  const std::vector<std::string> featured = featured_types(r);
  svg::LineChart tp, eff;
  tp.frame = {"throughput", "Throughput vs number of GPUs",
              "Training throughput of the fastest plan at each cluster size, one line per instance type.", 760, 400};
  eff.frame = {"scaling-efficiency", "Scaling efficiency vs number of GPUs",
               "Throughput per GPU relative to the smallest cluster of the same instance type that fits.", 760, 400};
  const svg::Format gpus_fmt = [](double v) { return fmt::format("{:.0f}", v); };
  tp.x = {"GPUs", svg::Scale::log2, gpus_fmt, {}, {}, false};
  eff.x = tp.x;
  tp.y = {"throughput (tokens/s, estimate)", svg::Scale::linear, {}, {}, {}, true};
  eff.y = {"scaling efficiency (%)", svg::Scale::linear, [](double v) { return fmt::format("{:.0f}", v); }, {}, {}, true};
  for (size_t i = 0; i < featured.size(); ++i) {
    tp.series.push_back({featured[i], {}, static_cast<int>(i)});
    eff.series.push_back({featured[i], {}, static_cast<int>(i)});
  }
  Table t{{"instance type", ">GPUs", ">instances", ">tokens/s", ">tokens/s per GPU", ">scaling efficiency", ">dp/tp/pp", ">MFU"}, {}};
  std::set<std::string> left_out;
  for (const auto& s : r.sizes) {
    const auto it = std::find(featured.begin(), featured.end(), s.instance_type);
    if (it == featured.end()) {
      left_out.insert(s.instance_type);
      continue;
    }
    const size_t k = static_cast<size_t>(it - featured.begin());
    const std::string label = fmt::format("{} x {} ({} GPUs, {})", s.instances, s.instance_type, s.gpus, split_of(s.best.plan));
    tp.series[k].points.push_back(
        {static_cast<double>(s.gpus), s.tokens_per_s, fmt::format("{}: {} tokens/s", label, units::format_count(s.tokens_per_s))});
    eff.series[k].points.push_back(
        {static_cast<double>(s.gpus), 100.0 * s.scaling_efficiency, fmt::format("{}: {}", label, pct(s.scaling_efficiency))});
    t.rows.push_back({s.instance_type, std::to_string(s.gpus), std::to_string(s.instances), units::format_count(s.tokens_per_s),
                      units::format_count(s.tokens_per_s / s.gpus), pct(s.scaling_efficiency), split_of(s.best.plan),
                      pct(s.best.step.mfu)});
  }
  d.chart(svg::line_chart(tp));
  d.chart(svg::line_chart(eff));
  d.paragraph(fmt::format(
      "The fastest evaluated plan at each size (estimate). Scaling efficiency = tokens/s per GPU divided by tokens/s per "
      "GPU at the smallest size of the same instance type that fits (100% there); the global batch is the same at "
      "every size, so larger clusters run fewer micro-batches per GPU.{}",
      left_out.empty() ? ""
                       : fmt::format(" Shown: the instance types of the top plans and the Pareto frontier, then the fastest, "
                                     "{} in all; left out: {}.",
                                     featured.size(), join(std::vector<std::string>(left_out.begin(), left_out.end()), ", "))));
  d.table(std::move(t));
}

void breakdown(Doc& d, const Report& r) {
  d.heading("Step-time breakdown");
  std::vector<Parts> rows;
  std::vector<std::string> labels;
  for (const auto& rp : r.plans) {
    rows.push_back(estimate_parts(rp));
    labels.push_back(fmt::format("#{} {} {} (estimate)", rp.position, instances_of(rp.candidate.plan), split_of(rp.candidate.plan)));
  }
  if (r.simulated) {
    rows.insert(rows.begin() + 1, simulated_parts(*r.simulated, r.plans.front().input_time_per_step_s));
    labels.insert(labels.begin() + 1, "#1 (simulated)");
  }
  const std::vector<Part> parts = breakdown_parts(rows);
  svg::BarChart ch;
  ch.frame = {"step-breakdown", "Step-time breakdown",
              "Where each plan's step time goes: compute, exposed communication by kind, pipeline bubble, optimizer "
              "and input stall, stacked.",
              760, 0};
  ch.x = {"time per step (ms)", svg::Scale::linear, {}, {}, {}, true};
  for (Part p : parts) {
    ch.categories.emplace_back(part_info(p).name);
    ch.colors.push_back(part_info(p).color);
  }
  Table t{{"plan", ">step"}, {}};
  for (Part p : parts) t.headers.push_back(">" + std::string(part_info(p).name));
  for (size_t i = 0; i < rows.size(); ++i) {
    svg::BarRow br;
    br.label = labels[i];
    double total = 0;
    std::vector<std::string> cells = {labels[i], ""};
    for (Part p : parts) {
      const double v = rows[i][static_cast<size_t>(p)];
      br.values.push_back(v * 1e3);
      total += v;
      cells.push_back(v > 0 ? dur(v) : "0");
    }
    cells[1] = dur(total);
    br.note = dur(total);
    ch.rows.push_back(std::move(br));
    t.rows.push_back(std::move(cells));
  }
  d.chart(svg::bar_chart(ch));
  d.paragraph(
      "Exposed communication is what compute does not hide. Estimate: the planner's model on its critical pipeline "
      "rank (\"other\": step time beyond the named parts). Simulated: the critical rank of one simulated step, every "
      "instant in one part (\"other\": launch gaps, waiting for slower collective members). I/O stall: reading a "
      "step's samples (S3 FastFile) takes longer than the step; from the job model.");
  d.table(std::move(t));
}

void memory(Doc& d, const Report& r) {
  const ReportPlan& b = r.plans.front();
  d.heading(r.single_plan ? "Memory per GPU by pipeline stage" : "Memory per GPU by pipeline stage (best plan)");
  svg::BarChart ch;
  ch.frame = {"memory", "Memory per GPU by pipeline stage",
              "Memory of one GPU of each pipeline stage by kind, stacked, against the usable GPU memory.", 760, 0};
  ch.x = {"memory per GPU (GiB, estimate)", svg::Scale::linear, {}, {}, {}, true};
  ch.categories = {"weights", "gradients", "optimizer", "activations", "buffers", "framework"};
  ch.colors = {0, 3, 4, 2, 1, 8};
  Table t{{">stage", ">weights", ">gradients", ">optimizer", ">activations", ">micro-batches in flight", ">buffers",
           ">framework", ">total", ">capacity", ">free"},
          {}};
  const double g = 1073741824.0;
  double capacity = 0;
  for (const auto& m : b.memory_per_stage) {
    capacity = m.capacity_bytes;
    const double buffers = m.workspace_bytes + m.comm_buffer_bytes;
    svg::BarRow row;
    row.label = fmt::format("stage {}", m.stage);
    row.values = {m.weights_bytes / g, m.gradients_bytes / g, m.optimizer_bytes / g, m.activations_bytes / g, buffers / g,
                  m.framework_bytes / g};
    row.note = gib(m.total_bytes());
    ch.rows.push_back(std::move(row));
    t.rows.push_back({std::to_string(m.stage), gib(m.weights_bytes), gib(m.gradients_bytes), gib(m.optimizer_bytes),
                      gib(m.activations_bytes), fmt::format("{:g}", m.micro_batches_in_flight), gib(buffers),
                      gib(m.framework_bytes), gib(m.total_bytes()), gib(m.capacity_bytes),
                      gib(m.capacity_bytes - m.total_bytes())});
  }
  ch.markers.push_back({capacity / g, fmt::format("capacity {}", gib(capacity)), false});
  d.chart(svg::bar_chart(ch));
  d.paragraph(fmt::format(
      "{}: the memory model (ZeRO-{} model states, activations of the micro-batches in flight, {}). "
      "Buffers = workspace + communication buffers; framework = CUDA context and allocator reserve.",
      plan_summary(b.candidate.plan), b.candidate.plan.zero_stage, recomputation(b.candidate.plan.recompute)));
  d.table(std::move(t));
}

void simulated_step(Doc& d, const Report& r) {
  d.heading(r.single_plan ? "One simulated step" : "One simulated step (best plan)");
  if (!r.simulated) {
    d.paragraph("Not simulated: see the notes at the end.");
    return;
  }
  const SimulatedTimeline& s = *r.simulated;
  const double diff = s.analytical_step_time_s > 0 ? s.step_time_s / s.analytical_step_time_s - 1 : 0;
  std::vector<std::string> shown;
  for (int rank : s.ranks_shown) shown.push_back(std::to_string(rank));
  d.paragraph(fmt::format(
      "Simulated step time {} vs {} estimated ({:+.1f}%): discrete-event simulation of the plan lowered at {} "
      "granularity, {} fidelity ({} in {}). Critical rank {}. The chart draws {} (one per "
      "symmetry class{}), one row per stream.",
      dur(s.step_time_s), dur(s.analytical_step_time_s), diff * 100.0, s.granularity, s.fidelity,
      plural(static_cast<size_t>(s.world_size), "rank", "ranks"), plural(s.symmetry_classes, "symmetry class", "symmetry classes"),
      s.breakdown.critical_rank, (shown.size() == 1 ? "rank " : "ranks ") + join(shown, ", "),
      s.ranks_shown.size() < s.symmetry_classes ? fmt::format(", the first {}", s.ranks_shown.size()) : ""));
  d.chart(svg::gantt_chart(gantt_of(s.timeline, s.ranks_shown, "gantt")));
  Table t{{"part", ">estimate", ">simulated"}, {}};
  const Parts est = estimate_parts(r.plans.front());
  const Parts sim_parts = simulated_parts(s, 0);
  for (size_t k = 0; k < kNumParts; ++k) {
    const Part p = static_cast<Part>(k);
    if (p == Part::forward || p == Part::backward || p == Part::io_stall) continue;
    if (est[k] == 0 && sim_parts[k] == 0 && p != Part::compute) continue;
    t.rows.push_back({std::string(part_info(p).name), dur(est[k]), dur(sim_parts[k])});
  }
  t.rows.push_back({"step", dur(s.analytical_step_time_s), dur(s.step_time_s)});
  d.table(std::move(t));
}

// A histogram of spot Monte Carlo samples (divided by `unit`), with p50 / p90 markers. A long
// tail (max > 2 x p99) is cut at p99; the on-demand value is marked when it falls in range.
svg::HistogramChart spot_histogram(const std::string& id, const std::string& title, const std::string& what,
                                   const std::vector<double>& samples, const sim::MonteCarloStats& stats, double on_demand,
                                   double unit) {
  svg::HistogramChart h;
  for (double v : samples) h.samples.push_back(v / unit);
  const bool clip = stats.max > 2 * stats.p99 && stats.p99 > stats.min;
  if (clip) h.clip_above = stats.p99 / unit;
  h.frame = {id, title,
             fmt::format("Histogram of the {} of {} Monte Carlo runs on spot{}.", what, samples.size(),
                         clip ? ", up to the 99th percentile" : ""),
             760, 360};
  h.markers = {{stats.p50 / unit, "spot p50", true}, {stats.p90 / unit, "spot p90", true}};
  if (on_demand >= stats.min && on_demand <= (clip ? stats.p99 : stats.max)) h.markers.push_back({on_demand / unit, "on-demand p50", false});
  return h;
}

std::string interval_text(double s) { return s > 0 ? dur(s) : "final only"; }

void spot(Doc& d, const Report& r) {
  if (!r.spot) return;
  const SpotStudy& s = *r.spot;
  d.heading(r.single_plan ? "Spot and purchase options" : "Spot and purchase options (best plan)");
  d.paragraph(fmt::format(
      "Whole job of the plan: startup, {} of compute, checkpoints at Young's interval for each option's MTBF, "
      "interruptions and restarts. Spot interruptions: {}. Prices: ${:.3f} on-demand, ${:.3f} spot per instance-hour.",
      dur(s.options.front().estimate.compute_s), s.interruption_model, s.on_demand_price_usd_per_hour,
      s.spot_price_usd_per_hour));
  Table t{{"purchase", ">checkpoint every", ">MTBF", ">without interruptions", ">time mean", ">time p50", ">time p90",
           ">cost without interruptions", ">cost mean", ">cost p50", ">cost p90", ">interruptions (mean)"},
          {}};
  svg::BarChart time_bars, cost_bars;
  time_bars.frame = {"purchase-time", "Completion time by purchase option",
                     "Median completion time of the whole job (bar) and its 90th percentile (whisker), Monte Carlo.", 760, 0};
  cost_bars.frame = {"purchase-cost", "Cost by purchase option",
                     "Median cost of the whole job (bar) and its 90th percentile (whisker), Monte Carlo.", 760, 0};
  double max_time = 0;
  for (const auto& o : s.options) max_time = std::max(max_time, o.monte_carlo ? o.monte_carlo->time_s.p90 : o.estimate.total_s);
  const auto [unit, unit_s] = time_unit(max_time);
  time_bars.x = {fmt::format("completion time ({}, Monte Carlo)", unit), svg::Scale::linear, {}, {}, {}, true};
  cost_bars.x = {"cost (USD, Monte Carlo)", svg::Scale::linear, dollars(), {}, {}, true};
  time_bars.categories = {"p50"};
  cost_bars.categories = {"p50"};
  time_bars.colors = {0};
  cost_bars.colors = {1};
  for (const auto& o : s.options) {
    const auto& e = o.estimate;
    if (o.monte_carlo) {
      const auto& mc = *o.monte_carlo;
      t.rows.push_back({o.name, interval_text(o.checkpoint_interval_s), dur(1.0 / o.interruption_rate_per_s), dur(e.total_s),
                        dur(mc.time_s.mean), dur(mc.time_s.p50), dur(mc.time_s.p90), usd(e.cost_usd), usd(mc.cost_usd.mean),
                        usd(mc.cost_usd.p50), usd(mc.cost_usd.p90), fmt::format("{:.2f}", mc.interruptions.mean)});
      time_bars.rows.push_back({o.name, {mc.time_s.p50 / unit_s}, mc.time_s.p90 / unit_s,
                                fmt::format("p50 {}, p90 {}", dur(mc.time_s.p50), dur(mc.time_s.p90))});
      cost_bars.rows.push_back({o.name, {mc.cost_usd.p50}, mc.cost_usd.p90,
                                fmt::format("p50 {}, p90 {}", usd(mc.cost_usd.p50), usd(mc.cost_usd.p90))});
    } else {
      t.rows.push_back({o.name, interval_text(o.checkpoint_interval_s), "-", dur(e.total_s), "-", "-", "-", usd(e.cost_usd),
                        "-", "-", "-", "0"});
      time_bars.rows.push_back({o.name, {e.total_s / unit_s}, std::nullopt, dur(e.total_s)});
      cost_bars.rows.push_back({o.name, {e.cost_usd}, std::nullopt, usd(e.cost_usd)});
    }
  }
  d.table(std::move(t));
  d.chart(svg::bar_chart(time_bars));
  d.chart(svg::bar_chart(cost_bars));
  d.paragraph(
      "Without interruptions: the job model's time and cost if nothing ever interrupts it. On-demand jobs are "
      "interrupted only by hardware failures; a blend keeps the named instances on-demand and loses the job to any "
      "spot reclaim.");

  const PurchaseOutcome* spot_option = nullptr;
  for (const auto& o : s.options)
    if (o.name == "spot") spot_option = &o;
  if (!s.spot_time_samples_s.empty() && spot_option && spot_option->monte_carlo) {
    const auto& mc = *spot_option->monte_carlo;
    const PurchaseOutcome& od = s.options.front();
    const double on_demand_s = od.monte_carlo ? od.monte_carlo->time_s.p50 : od.estimate.total_s;
    const double on_demand_usd = od.monte_carlo ? od.monte_carlo->cost_usd.p50 : od.estimate.cost_usd;
    const auto [hu, hu_s] = time_unit(std::max(mc.time_s.p99, on_demand_s));
    svg::HistogramChart ht = spot_histogram("spot-time-histogram", "Spot: completion time", "completion time",
                                            s.spot_time_samples_s, mc.time_s, on_demand_s, hu_s);
    ht.x = {fmt::format("completion time ({}, Monte Carlo)", hu), svg::Scale::linear, {}, {}, {}, false};
    svg::HistogramChart hc = spot_histogram("spot-cost-histogram", "Spot: cost", "cost", s.spot_cost_samples_usd, mc.cost_usd,
                                            on_demand_usd, 1.0);
    hc.x = {"cost (USD, Monte Carlo)", svg::Scale::linear, dollars(), {}, {}, false};
    hc.color = 1;
    d.chart(svg::histogram_chart(ht));
    d.chart(svg::histogram_chart(hc));
    d.paragraph(fmt::format("Spot over {} runs: completion time min {}, p50 {}, p90 {}, p99 {}, max {}; cost min {}, p50 {}, "
                            "p90 {}, p99 {}, max {}. On-demand (Monte Carlo p50): {}, {}.",
                            mc.runs, dur(mc.time_s.min), dur(mc.time_s.p50), dur(mc.time_s.p90), dur(mc.time_s.p99),
                            dur(mc.time_s.max), usd(mc.cost_usd.min), usd(mc.cost_usd.p50), usd(mc.cost_usd.p90),
                            usd(mc.cost_usd.p99), usd(mc.cost_usd.max), dur(on_demand_s), usd(on_demand_usd)));
  }

  if (s.interval) {
    const auto& st = *s.interval;
    d.subheading("Checkpoint interval (spot)");
    svg::LineChart ch;
    ch.frame = {"checkpoint-interval", "Spot cost vs checkpoint interval",
                "Mean cost of the whole job on spot at checkpoint intervals around Young's, Monte Carlo with common random numbers.",
                760, 380};
    double max_iv = 0;
    for (const auto& row : st.rows) max_iv = std::max(max_iv, row.interval_s);
    const auto [iu, iu_s] = time_unit(max_iv);
    const std::string iv_unit = max_iv < 600 ? "s" : iu;
    const double iv_s = max_iv < 600 ? 1.0 : iu_s;
    ch.x = {fmt::format("checkpoint interval ({} of work)", iv_unit), svg::Scale::log2, [](double v) { return svg::compact_number(v); },
            {}, {}, false};
    ch.y = {"mean cost (USD, Monte Carlo)", svg::Scale::linear, dollars(), {}, {}, false};
    ch.series.push_back({"Monte Carlo mean cost", {}, 1});
    Table t2{{">interval", ">mean time", ">95% CI", ">closed form", ">mean cost", ""}, {}};
    for (size_t k = 0; k < st.rows.size(); ++k) {
      const auto& row = st.rows[k];
      ch.series.back().points.push_back({row.interval_s / iv_s, row.mc_mean_cost_usd,
                                         fmt::format("{}: {} mean cost, {} mean time", dur(row.interval_s),
                                                     usd(row.mc_mean_cost_usd), dur(row.mc_mean_s))});
      std::string mark = k == st.young_row ? "Young" : "";
      if (k == st.best_row) mark += mark.empty() ? "lowest mean time" : ", lowest mean time";
      t2.rows.push_back({dur(row.interval_s), dur(row.mc_mean_s), "+-" + dur(row.mc_ci95_s),
                         row.closed_form_s ? dur(*row.closed_form_s) : "-", usd(row.mc_mean_cost_usd), mark});
    }
    ch.markers.push_back({st.young_s / iv_s, "Young", true});
    d.chart(svg::line_chart(ch));
    d.paragraph(fmt::format(
        "Checkpoint write C = {}, job MTBF M = {}: Young sqrt(2CM) = {}, Daly = {}. Young's mean time minus the lowest "
        "Monte Carlo mean = {} +- {} (paired, 95%): {}.",
        dur(st.checkpoint_s), dur(st.mtbf_s), dur(st.young_s), dur(st.daly_s), dur(st.young_minus_best_s),
        dur(st.young_minus_best_ci95_s), st.young_within_ci ? "within the confidence interval" : "NOT within the confidence interval"));
    d.table(std::move(t2));
  }
}

void prices_and_assumptions(Doc& d, const Report& r) {
  d.heading("Prices, assumptions and notes");
  Table t{{"instance type", ">on-demand $/h", ">spot $/h", "region", "interruption bucket", "sources (field: id (date))"}, {}};
  for (const auto& p : r.prices)
    t.rows.push_back({p.instance_type, per_hour(p.on_demand_usd_per_hour),
                      per_hour(p.spot_usd_per_hour) + (p.spot_estimated && p.spot_usd_per_hour ? " (estimated)" : ""),
                      p.region.empty() ? "-" : p.region, p.interruption_bucket.empty() ? "-" : p.interruption_bucket,
                      join(p.sources, "; ")});
  d.paragraph(fmt::format("Prices per instance-hour ({}), with the catalog source and date of each figure "
                          "(`trainplan catalog NAME` describes the sources):",
                          plan::platform_name(r.platform)));
  d.table(std::move(t));
  std::vector<std::string> a = {
      "Step times are the planner's analytical estimate unless marked simulated.",
      "Time to train = steps x step time; the whole-job figures (spot section, spot columns) add startup, checkpoint "
      "writes, interruptions and restarts from the job model.",
  };
  for (const auto& s : r.assumptions) a.push_back(s);
  d.subheading("Assumptions");
  d.bullets(a);
  if (!r.notes.empty()) {
    d.subheading("Notes");
    d.bullets(r.notes);
  }
}

// Predicted vs measured (ReportOptions::history_db): the latest predicted run's task classes
// side by side, the step-time error over the runs per hardware, and the runs as a table.
void measured_vs_predicted(Doc& d, const Report& r) {
  if (r.options.history_db.empty()) return;
  d.heading("Predicted vs measured");
  if (r.measured_runs.empty()) {
    d.paragraph(fmt::format("The error history {} holds no runs yet: trainplan execute and trainplan calibrate record them.",
                            r.options.history_db));
    return;
  }
  const calibration::HistoryRun* last = nullptr;
  for (const auto& run : r.measured_runs)
    if (run.predicted_step_s && !run.task_classes.empty()) last = &run;
  if (last) {
    svg::BarChart ch;
    ch.frame = {"measured-classes", "Predicted vs measured by task class",
                fmt::format("Run {} ({} on {}, {}): time per task class summed over ranks, as the profile predicted it "
                            "and as it was measured.",
                            last->id, last->command, last->hardware, last->plan),
                760, 0};
    ch.x = {"time per step, summed over ranks (ms)", svg::Scale::linear, {}, {}, {}, true};
    svg::BarRow pred{"predicted (" + last->profile + ")", {}, {}, dur(*last->predicted_step_s) + " step"};
    svg::BarRow meas{"measured", {}, {}, dur(last->measured_step_s) + " step"};
    Table t{{"task class", ">predicted", ">measured", ">error"}, {}};
    for (const auto& c : last->task_classes) {
      ch.categories.push_back(c.task_class);
      pred.values.push_back(c.predicted_s * 1e3);
      meas.values.push_back(c.measured_s * 1e3);
      t.rows.push_back({c.task_class, dur(c.predicted_s), dur(c.measured_s),
                        c.measured_s > 0 ? fmt::format("{:+.1f}%", 100 * (c.predicted_s / c.measured_s - 1)) : "-"});
    }
    ch.rows = {pred, meas};
    d.chart(svg::bar_chart(ch));
    d.table(std::move(t));
  }
  svg::LineChart trend;
  trend.frame = {"measured-trend", "Step-time error over the recorded runs",
                 "Predicted minus measured step time, as a share of the measured, for each run with a prediction, one "
                 "line per hardware; the history's order on the x axis.",
                 760, 360};
  trend.x = {"run (oldest first)", svg::Scale::linear, {}, {}, {}, false};
  trend.y = {"step-time error (%)", svg::Scale::linear, {}, {}, {}, true};
  std::map<std::string, size_t> series_of;
  Table runs{{">run", "date", "command", "hardware", "plan", "profile", ">predicted", ">measured", ">error"}, {}};
  for (size_t i = 0; i < r.measured_runs.size(); ++i) {
    const auto& run = r.measured_runs[i];
    const auto e = run.step_error();
    runs.rows.push_back({std::to_string(run.id), run.date, run.command, run.hardware, run.plan, run.profile,
                         run.predicted_step_s ? dur(*run.predicted_step_s) : "-", dur(run.measured_step_s),
                         e ? fmt::format("{:+.1f}%", 100 * *e) : "-"});
    if (!e) continue;
    auto [it, added] = series_of.emplace(run.hardware, trend.series.size());
    if (added) trend.series.push_back({run.hardware, {}, -1});
    trend.series[it->second].points.push_back(
        {static_cast<double>(i + 1), 100 * *e, fmt::format("run {}: {:+.1f}%", run.id, 100 * *e)});
  }
  if (!trend.series.empty()) d.chart(svg::line_chart(trend));
  d.paragraph(fmt::format("The latest {} runs of the error history {} (trainplan history lists them all).",
                          r.measured_runs.size(), r.options.history_db));
  d.table(std::move(runs));
}

// The best plan's convergence warnings (planner/convergence.hpp), each with its source.
void convergence(Doc& d, const Report& r) {
  if (r.convergence.empty()) return;
  d.heading("Convergence warnings");
  d.paragraph(fmt::format("{} changes the training dynamics; these warnings change no ranking and no exit code:",
                          r.single_plan ? "The plan" : "The best plan"));
  std::vector<std::string> items;
  for (const auto& w : r.convergence) items.push_back(fmt::format("{} ({}: {})", w.message, w.code, w.source));
  d.bullets(items);
}

// The best plan as SageMaker jobs (ReportOptions::job): warm pool, sweep, managed spot.
void sagemaker_job(Doc& d, const Report& r) {
  if (!r.job) return;
  const JobSection& s = *r.job;
  d.heading("SageMaker jobs");
  d.paragraph(fmt::format("{} as SageMaker training jobs ({} x {}, ${:.3f} per instance-hour on-demand), uninterrupted, as "
                          "`trainplan job` computes them.",
                          r.single_plan ? "The plan" : "The best plan", s.job.nodes, r.plans.front().candidate.plan.instance_type,
                          s.job.prices.on_demand_usd_per_hour));
  Table t{{"", ">cold start"}, {}};
  if (s.warm) t.headers.push_back(">warm pool");
  auto row = [&](const std::string& name, auto value) {
    std::vector<std::string> cells = {name, value(s.cold)};
    if (s.warm) cells.push_back(value(*s.warm));
    t.rows.push_back(cells);
  };
  using E = sim::JobEstimate;
  row("start-up (wall)", [](const E& e) { return dur(e.startup_s); });
  row("start-up billed", [](const E& e) { return dur(e.startup_billed_s); });
  row("training", [](const E& e) { return dur(e.compute_s + e.io_stall_s); });
  row("checkpoints", [](const E& e) { return dur(e.checkpoint_total_s); });
  row("wall", [](const E& e) { return dur(e.total_s); });
  row("billed per instance", [](const E& e) { return dur(e.billed_s_per_node); });
  row("cost", [](const E& e) { return usd(e.cost_usd); });
  d.table(std::move(t));
  if (s.warm)
    d.paragraph(fmt::format("A warm pool start skips provisioning and the image pull: it saves {} of wall time and {} billed per "
                            "instance; the pool itself is billed while it waits (its keep-alive).",
                            dur(s.cold.total_s - s.warm->total_s), dur(s.cold.billed_s_per_node - s.warm->billed_s_per_node)));
  if (s.sweep) {
    const planner::SweepResult& w = *s.sweep;
    d.subheading("Sweep");
    d.paragraph(fmt::format("{} jobs, {} at a time ({} waves){}.", w.jobs, w.slots, w.waves,
                            s.request.keep_alive.empty() ? ", no warm pool"
                                                         : fmt::format(", warm pools kept alive {}", s.request.keep_alive)));
    d.table(Table{{"", ">wall", ">billed instance-hours", ">cost", ">warm starts", ">keep-alive instance-hours"},
                  {{"this sweep", dur(w.wall_s), fmt::format("{:.2f}", w.billed_s / 3600), usd(w.cost_usd),
                    std::to_string(w.warm_starts), fmt::format("{:.2f}", w.keep_alive_billed_s / 3600)},
                   {"without a warm pool", dur(w.cold_wall_s), fmt::format("{:.2f}", w.cold_billed_s / 3600), usd(w.cold_cost_usd),
                    "0", "0"}}});
  }
  if (s.spot) {
    const sim::MonteCarloResult& mc = *s.spot;
    d.subheading("Managed spot");
    d.paragraph(fmt::format("{} Monte Carlo runs at ${:.3f} per instance-hour{}{}. A job still running at max_wait (waiting for "
                            "capacity included) fails; a job whose billed time reaches max_run is stopped.",
                            mc.runs, s.spot_usd_per_hour, s.request.max_wait.empty() ? "" : ", max_wait " + s.request.max_wait,
                            s.request.max_run.empty() ? "" : ", max_run " + s.request.max_run));
    d.table(Table{{"", ">mean", ">p50", ">p90"},
                  {{"completion time", dur(mc.time_s.mean), dur(mc.time_s.p50), dur(mc.time_s.p90)},
                   {"cost", usd(mc.cost_usd.mean), usd(mc.cost_usd.p50), usd(mc.cost_usd.p90)},
                   {"interruptions", fmt::format("{:.2f}", mc.interruptions.mean), fmt::format("{:.0f}", mc.interruptions.p50),
                    fmt::format("{:.0f}", mc.interruptions.p90)}}});
    std::vector<std::string> items;
    if (mc.p_exceed_max_wait) items.push_back(fmt::format("P(exceeds max_wait {}) = {:.3f}", s.request.max_wait, *mc.p_exceed_max_wait));
    if (mc.p_exceed_max_run) items.push_back(fmt::format("P(exceeds max_run {}) = {:.3f}", s.request.max_run, *mc.p_exceed_max_run));
    d.bullets(items);
  }
}

Doc build_doc(const Report& r) {
  TP_ASSERT(!r.plans.empty());
  Doc d;
  intro(d, r);
  best_plan(d, r);
  convergence(d, r);
  top_plans(d, r);
  if (!r.single_plan) {
    cost_vs_time(d, r);
    scaling(d, r);
  }
  breakdown(d, r);
  memory(d, r);
  simulated_step(d, r);
  spot(d, r);
  sagemaker_job(d, r);
  measured_vs_predicted(d, r);
  prices_and_assumptions(d, r);
  return d;
}

}  // namespace

namespace report_detail {

// ---- writers ---------------------------------------------------------------------------------------

static std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

static std::string header_text(const std::string& h) { return !h.empty() && h[0] == '>' ? h.substr(1) : h; }
static bool right_aligned(const std::string& h) { return !h.empty() && h[0] == '>'; }

std::string markdown_of(const Doc& d) {
  std::string out;
  for (const auto& b : d.blocks()) {
    switch (b.kind) {
      case Block::Kind::title: out += fmt::format("# {}\n\n", b.text); break;
      case Block::Kind::heading: out += fmt::format("## {}\n\n", b.text); break;
      case Block::Kind::subheading: out += fmt::format("### {}\n\n", b.text); break;
      case Block::Kind::paragraph:
      case Block::Kind::markdown_only: out += fmt::format("{}\n\n", b.text); break;
      case Block::Kind::bullets:
        for (const auto& item : b.items) out += fmt::format("- {}\n", item);
        out += "\n";
        break;
      case Block::Kind::table: {
        out += "|";
        for (const auto& h : b.table.headers) out += fmt::format(" {} |", md_cell(header_text(h)));
        out += "\n|";
        for (const auto& h : b.table.headers) out += right_aligned(h) ? " ---: |" : " --- |";
        out += "\n";
        for (const auto& row : b.table.rows) {
          out += "|";
          for (const auto& cell : row) out += fmt::format(" {} |", md_cell(cell));
          out += "\n";
        }
        out += "\n";
        break;
      }
      case Block::Kind::chart: break;
    }
  }
  while (out.size() > 1 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n') out.pop_back();
  return out;
}

// Inline stylesheet: system fonts only, print-friendly.
constexpr const char* kStyle = R"(body{font-family:sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;color:#1a1a1a;line-height:1.45}
h1{font-size:24px}h2{font-size:19px;margin-top:34px;border-bottom:1px solid #ccc;padding-bottom:4px}h3{font-size:16px}
table{border-collapse:collapse;margin:10px 0 16px;font-size:13px}th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}
th{background:#f2f2f2}td.r,th.r{text-align:right;white-space:nowrap}tbody tr:nth-child(even){background:#fafafa}
figure{margin:12px 0}svg.chart{max-width:100%;height:auto;border:1px solid #e0e0e0}
)";

std::string html_of(const Doc& d) {
  std::string title;
  for (const auto& b : d.blocks())
    if (b.kind == Block::Kind::title) title = b.text;
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + svg::escape(title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  for (const auto& b : d.blocks()) {
    switch (b.kind) {
      case Block::Kind::title: out += "<h1>" + svg::escape(b.text) + "</h1>\n"; break;
      case Block::Kind::heading: out += "<h2>" + svg::escape(b.text) + "</h2>\n"; break;
      case Block::Kind::subheading: out += "<h3>" + svg::escape(b.text) + "</h3>\n"; break;
      case Block::Kind::paragraph: out += "<p>" + svg::escape(b.text) + "</p>\n"; break;
      case Block::Kind::markdown_only: break;
      case Block::Kind::bullets:
        out += "<ul>\n";
        for (const auto& item : b.items) out += "<li>" + svg::escape(item) + "</li>\n";
        out += "</ul>\n";
        break;
      case Block::Kind::table: {
        out += "<table>\n<thead><tr>";
        for (const auto& h : b.table.headers)
          out += fmt::format("<th{}>{}</th>", right_aligned(h) ? " class=\"r\"" : "", svg::escape(header_text(h)));
        out += "</tr></thead>\n<tbody>\n";
        for (const auto& row : b.table.rows) {
          out += "<tr>";
          for (size_t i = 0; i < row.size(); ++i) {
            const bool right = i < b.table.headers.size() && right_aligned(b.table.headers[i]);
            out += fmt::format("<td{}>{}</td>", right ? " class=\"r\"" : "", svg::escape(row[i]));
          }
          out += "</tr>\n";
        }
        out += "</tbody>\n</table>\n";
        break;
      }
      case Block::Kind::chart: out += "<figure>\n" + b.text + "</figure>\n"; break;
    }
  }
  out += "</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace report_detail

std::string render_markdown(const Report& report) { return markdown_of(build_doc(report)); }
std::string render_html(const Report& report) { return html_of(build_doc(report)); }

svg::GanttChart gantt_of(const plan::Timeline& timeline, const std::vector<int>& ranks, const std::string& id) {
  double end = timeline.step_time_s;
  for (const auto& e : timeline.events) end = std::max(end, e.end_s);
  std::string unit = "ms";
  double scale = 1e3;
  if (end < 1e-3) {
    unit = "us";
    scale = 1e6;
  } else if (end > 10) {
    unit = "s";
    scale = 1;
  }
  // Category of an event, or nothing for instants (alloc / free).
  auto part_of = [](const plan::TimelineEvent& e) -> std::optional<Part> {
    switch (e.kind) {
      case plan::TaskKind::alloc:
      case plan::TaskKind::free: return std::nullopt;
      case plan::TaskKind::compute:
        switch (e.phase) {
          case plan::Phase::forward: return Part::forward;
          case plan::Phase::backward: return Part::backward;
          case plan::Phase::recompute: return Part::recompute;
          case plan::Phase::optimizer: return Part::optimizer;
          case plan::Phase::none: return Part::compute;
        }
        return Part::compute;
      default: return comm_part(e.purpose);
    }
  };
  std::array<bool, kNumParts> used{};
  std::map<std::pair<int, int>, std::vector<const plan::TimelineEvent*>> rows;  // (rank, stream) -> events
  for (const auto& e : timeline.events) {
    if (std::find(ranks.begin(), ranks.end(), e.rank) == ranks.end()) continue;
    const auto part = part_of(e);
    if (!part || !(e.end_s > e.start_s)) continue;
    used[static_cast<size_t>(*part)] = true;
    rows[{e.rank, e.stream}].push_back(&e);
  }
  svg::GanttChart c;
  c.frame = {id, fmt::format("One simulated step ({}, {})", timeline.source.empty() ? "timeline" : timeline.source, dur(end)),
             "Gantt chart of one training step: one row per rank and stream, one bar per task, coloured by compute phase "
             "or communication kind.",
             1100, 0};
  c.x = {fmt::format("time in the step ({})", unit), svg::Scale::linear, {}, 0.0, end * scale, true};
  std::array<int, kNumParts> category_of{};
  for (size_t k = 0; k < kNumParts; ++k) {
    if (!used[k]) continue;
    category_of[k] = static_cast<int>(c.categories.size());
    c.categories.emplace_back(part_info(static_cast<Part>(k)).name);
    c.colors.push_back(part_info(static_cast<Part>(k)).color);
  }
  for (const auto& [key, events] : rows) {
    const auto [rank, stream] = key;
    svg::GanttRow row;
    const std::string stream_name =
        stream >= 0 && static_cast<size_t>(stream) < timeline.streams.size() ? timeline.streams[static_cast<size_t>(stream)]
                                                                              : fmt::format("stream {}", stream);
    row.label = fmt::format("rank {} {}", rank, stream_name);
    for (const auto* e : events)
      row.bars.push_back({e->start_s * scale, e->end_s * scale, category_of[static_cast<size_t>(*part_of(*e))], e->label});
    c.rows.push_back(std::move(row));
  }
  return c;
}

}  // namespace trainplan::reports
