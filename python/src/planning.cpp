// trainplan.plan() (the search), check(), simulate() and job(): the same options and JSON as
// `trainplan plan`, `check`, `simulate --json` and `job --json`. Long calls release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include "bindings.hpp"
#include "common.hpp"
#include "json_convert.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/check.hpp"
#include "trainplan/planner/job.hpp"
#include "trainplan/planner/search_io.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace py = pybind11;

namespace trainplan::python {

using planner::JobRequest;
using planner::SearchOptions;

const Setters<SearchOptions>& search_options_setters() {
  using O = SearchOptions;
  static const Setters<O> s = {
      {"model", [](O& o, const py::handle& v) { o.model = is_path(v) ? path_of(v) : option_text(v, "model"); }},
      {"tokens", text_field(&O::tokens, "tokens")},
      {"samples", text_field(&O::samples, "samples")},
      {"epochs", text_field(&O::epochs, "epochs")},
      {"global_batch", int_field(&O::global_batch, "global_batch")},
      {"global_batch_range", text_field(&O::global_batch_range, "global_batch_range")},
      {"seq_len", int_field(&O::seq_len, "seq_len")},
      {"instances", text_field(&O::instances, "instances")},
      {"counts", text_field(&O::counts, "counts")},
      {"max_gpus", int_field(&O::max_gpus, "max_gpus")},
      {"max_instances", int_field(&O::max_instances, "max_instances")},
      {"objective", text_field(&O::objective, "objective")},
      {"deadline", text_field(&O::deadline, "deadline")},
      {"budget", text_field(&O::budget, "budget")},
      {"platform", text_field(&O::platform, "platform")},
      {"purchase", text_field(&O::purchase, "purchase")},
      {"spot", bool_field(&O::spot, "spot")},
      {"micro_batches", text_field(&O::micro_batches, "micro_batches")},
      {"zero", text_field(&O::zero, "zero")},
      {"tp", text_field(&O::tp, "tp")},
      {"pp", text_field(&O::pp, "pp")},
      {"dp", text_field(&O::dp, "dp")},
      {"data_input", text_field(&O::data_input, "data_input")},
      {"recompute", text_field(&O::recompute, "recompute")},
      {"schedules", text_field(&O::schedules, "schedules")},
      {"virtual_stages", text_field(&O::virtual_stages, "virtual_stages")},
      {"context_parallel", text_field(&O::context_parallel, "context_parallel")},
      {"expert_parallel", text_field(&O::expert_parallel, "expert_parallel")},
      {"capacity_factor", text_field(&O::capacity_factor, "capacity_factor")},
      {"load_imbalance", text_field(&O::load_imbalance, "load_imbalance")},
      {"dp_algorithms", text_field(&O::dp_algorithms, "dp_algorithms")},
      {"stack", text_field(&O::software, "stack")},
      {"bucket_sizes", text_field(&O::bucket_sizes, "bucket_sizes")},
      {"no_sequence_parallel", bool_field(&O::no_sequence_parallel, "no_sequence_parallel")},
      {"sync_bn", bool_field(&O::sync_bn, "sync_bn")},
      {"precision", text_field(&O::precision, "precision")},
      {"fp8_recipe", text_field(&O::fp8_recipe, "fp8_recipe")},
      {"tp_across_nodes", bool_field(&O::tp_across_nodes, "tp_across_nodes")},
      {"partition", text_field(&O::partition, "partition")},
      {"framework", text_field(&O::framework, "framework")},
      {"simulate_top", int_field(&O::simulate_top, "simulate_top")},
      {"exact_top", int_field(&O::exact_top, "exact_top")},
      {"spot_runs", int_field(&O::spot_runs, "spot_runs")},
      {"seed", int_field(&O::seed, "seed")},
      {"off", [](O& o, const py::handle& v) { o.off = text_list(v, "off"); }},
      {"top", int_field(&O::top, "top")},
      {"threads", int_field(&O::threads, "threads")},
  };
  return s;
}

namespace {

const Setters<JobRequest>& job_setters() {
  using O = JobRequest;
  static const Setters<O> s = {
      {"step_time", text_field(&O::step_time, "step_time")},
      {"calibration", text_field(&O::calibration, "calibration")},
      {"tokens", text_field(&O::tokens, "tokens")},
      {"samples", text_field(&O::samples, "samples")},
      {"epochs", [](O& o, const py::handle& v) { o.epochs = float_value(v, "epochs"); }},
      {"purchase", text_field(&O::purchase, "purchase")},
      {"platform", text_field(&O::platform, "platform")},
      {"warm_pool", bool_field(&O::warm_pool, "warm_pool")},
      {"data_input", text_field(&O::data_input, "data_input")},
      {"dataset_size", text_field(&O::dataset_size, "dataset_size")},
      {"sample_size", text_field(&O::sample_size, "sample_size")},
      {"checkpoint_storage", text_field(&O::checkpoint_storage, "checkpoint_storage")},
      {"fsx_deployment", text_field(&O::fsx_deployment, "fsx_deployment")},
      {"fsx_size", text_field(&O::fsx_size, "fsx_size")},
      {"ebs_throughput", text_field(&O::ebs_throughput, "ebs_throughput")},
      {"checkpoint_interval", text_field(&O::checkpoint_interval, "checkpoint_interval")},
      {"eval_every", int_field(&O::eval_every, "eval_every")},
      {"eval_time", text_field(&O::eval_time, "eval_time")},
      {"runs", int_field(&O::runs, "runs")},
      {"seed", int_field(&O::seed, "seed")},
      {"threads", int_field(&O::threads, "threads")},
      {"deadline", text_field(&O::deadline, "deadline")},
      {"max_wait", text_field(&O::max_wait, "max_wait")},
      {"max_run", text_field(&O::max_run, "max_run")},
      {"trace", text_field(&O::trace, "trace")},
      {"fit_traces", [](O& o, const py::handle& v) { o.fit_traces = text_list(v, "fit_traces"); }},
      {"needed", int_field(&O::needed, "needed")},
      {"no_hardware_failures", bool_field(&O::no_hardware_failures, "no_hardware_failures")},
      {"repeat", int_field(&O::repeat, "repeat")},
      {"parallel", int_field(&O::parallel, "parallel")},
      {"keep_alive", text_field(&O::keep_alive, "keep_alive")},
  };
  return s;
}

// A plan resolved against a catalog and validated, as every plan command starts.
struct ResolvedPlan {
  LoadedPlan loaded;
  std::shared_ptr<const hw::Catalog> catalog;
  plan::PlanContext ctx;
};
ResolvedPlan resolve_plan(const py::object& plan_obj, const py::object& catalog) {
  LoadedPlan lp = load_plan(plan_obj);
  auto cat = catalog_of(catalog);
  plan::PlanContext ctx = plan::resolve(lp.plan, *cat, lp.name);
  plan::validate(lp.plan, ctx, lp.name);
  return {std::move(lp), std::move(cat), std::move(ctx)};
}

py::object search(const py::object& catalog, bool all_ranked, const py::kwargs& kwargs) {
  SearchOptions o;
  apply_kwargs(o, kwargs, search_options_setters(), "plan");
  if (o.model.empty() || (o.tokens.empty() && o.samples.empty()))
    throw Error("plan() needs model= and tokens= (or samples= and epochs=)").hint("trainplan.plan(model=\"gpt2-124m\", tokens=\"1e9\", instances=\"p3.8xlarge\")");
  planner::SearchRequest req = planner::search_request(o);
  const auto cat = catalog_of(catalog);
  std::atomic<bool> cancel{false};
  req.cancel = &cancel;
  const planner::SearchResult res = without_gil([&] { return planner::search(req, *cat); }, &cancel);
  if (res.ranked.empty()) throw planner::nothing_fits_error(res, req);
  json::Json out = planner::search_summary_json(res);
  out["best"] = plan::to_json(planner::best_plan(res));
  json::Json ranked = planner::candidates_json(res);
  if (!all_ranked && ranked.size() > o.top) {
    json::Json shown = json::Json::array();
    for (size_t i = 0; i < o.top; ++i) shown.push_back(std::move(ranked[i]));
    ranked = std::move(shown);
  }
  out["ranked"] = std::move(ranked);
  return to_python(out);
}

py::object check(const py::object& plan_obj, const py::object& catalog) {
  const ResolvedPlan r = resolve_plan(plan_obj, catalog);
  json::Json j = planner::check_json(r.loaded.plan, r.ctx);
  j["plan"] = r.loaded.name;
  return to_python(j);
}

py::object simulate(const py::object& plan_obj, const std::string& fidelity, const std::string& granularity,
                    const py::object& calibration, double straggler_stddev, int64_t seed, double overlap_slowdown,
                    const std::string& trace_ranks, bool timeline, const py::object& trace_file, const py::object& timeline_file,
                    const py::object& catalog) {
  const ResolvedPlan r = resolve_plan(plan_obj, catalog);
  sim::SimulateRequest req;
  req.fidelity = fidelity;
  req.granularity = granularity;
  if (!calibration.is_none()) req.calibration = path_of(calibration);
  req.straggler_stddev = straggler_stddev;
  req.seed = static_cast<uint64_t>(seed);  // a negative seed is refused by plan_sim_options
  req.overlap_slowdown = overlap_slowdown;
  req.trace_ranks = trace_ranks;
  const std::string trace_path = trace_file.is_none() ? "" : path_of(trace_file);
  const std::string timeline_path = timeline_file.is_none() ? "" : path_of(timeline_file);
  std::string shown;
  const sim::PlanSimOptions o =
      sim::plan_sim_options(req, r.loaded.plan, r.ctx, timeline || !trace_path.empty() || !timeline_path.empty(), &shown);
  const json::Json j = without_gil([&] {
    const sim::PlanSimResult res = sim::simulate_plan(r.loaded.plan, r.ctx, o);
    json::Json out = sim::to_json(res, r.loaded.plan, r.ctx);
    out["plan"] = r.loaded.name;
    out["analytical_step_time_s"] = planner::estimate_step(r.loaded.plan, r.ctx).step_time_s;
    out["calibration"] = sim::calibration_description(req.calibration);
    if (!timeline_path.empty()) plan::write_timeline_file(timeline_path, res.step.timeline);
    if (!trace_path.empty()) plan::write_chrome_trace_file(trace_path, res.step.timeline);
    if (o.sim.record_timeline) out["timeline_ranks"] = shown;
    if (timeline) out["timeline"] = plan::to_json(res.step.timeline);
    return out;
  });
  return to_python(j);
}

py::object job(const py::object& plan_obj, const py::object& catalog, const py::kwargs& kwargs) {
  JobRequest req;
  apply_kwargs(req, kwargs, job_setters(), "job");
  const ResolvedPlan r = resolve_plan(plan_obj, catalog);
  const json::Json j = without_gil([&] {
    const planner::JobAnalysis a = planner::analyze_job(r.loaded.plan, r.ctx, req);
    json::Json out = planner::to_json(a, r.loaded.name);
    out["plan_with_job"] = plan::to_json(planner::plan_with_job(r.loaded.plan, a));
    return out;
  });
  return to_python(j);
}

}  // namespace

void bind_planning(py::module_& m) {
  m.def("plan", &search, py::arg("catalog") = py::none(), py::arg("all_ranked") = false,
        R"(Plan search, as `trainplan plan`: keyword arguments are its options with '-' as '_'
(model, tokens or samples and epochs, instances, counts, max_gpus, max_instances, objective,
deadline, budget, platform, purchase, spot, global_batch, global_batch_range, seq_len,
micro_batches, zero, tp, pp, dp, data_input,
recompute, schedules, virtual_stages (--vp), context_parallel (--cp), expert_parallel (--ep),
capacity_factor, load_imbalance, dp_algorithms,
bucket_sizes, no_sequence_parallel, sync_bn, precision, fp8_recipe, tp_across_nodes, partition, framework (--for),
simulate_top, exact_top, spot_runs, seed, off, top, threads). Quantities take str ("300B",
"30d", "$2M") or numbers; lists take a list or a comma-separated str.
Returns a dict: "best" (the best plan's JSON with "predicted", what `plan -o` writes),
"ranked" (the best `top` candidates as `plan --json` writes them; all_ranked=True: every
evaluated candidate, what `plan --json FILE` writes), "pareto",
"stages", "counts", "dropped", "global_batch", "seq_len", "enumerated", "cancelled",
"rank_correlation". Releases the GIL; Ctrl-C stops the search and keeps what was found
("cancelled": True). Raises trainplan.Error for bad options and when nothing fits.)");
  m.def("check", &check, py::arg("plan"), py::arg("catalog") = py::none(),
        "`trainplan check` in numbers: validates a plan (dict or path) and returns its memory per pipeline stage, "
        "whether it fits, the analytical step estimate and, with training_tokens, steps, time and on-demand cost.");
  m.def("simulate", &simulate, py::arg("plan"), py::arg("fidelity") = "auto", py::arg("granularity") = "auto",
        py::arg("calibration") = py::none(), py::arg("straggler_stddev") = 0.0, py::arg("seed") = 1,
        py::arg("overlap_slowdown") = 0.0, py::arg("trace_ranks") = "auto", py::arg("timeline") = false, py::arg("trace_file") = py::none(),
        py::arg("timeline_file") = py::none(), py::arg("catalog") = py::none(),
        "`trainplan simulate --json`: one step of a plan (dict or path) through the discrete-event simulator: step "
        "time, breakdown, per-rank utilization, memory and traffic, MFU and the analytical estimate. Options as the "
        "CLI's (fidelity, granularity, calibration, straggler_stddev, seed, overlap_slowdown, trace_ranks), checked "
        "the same way. timeline=True adds the Timeline (\"timeline\"); trace_file / timeline_file write the Chrome "
        "trace / Timeline JSON; \"timeline_ranks\" says which ranks they hold. Releases the GIL.");
  m.def("job", &job, py::arg("plan"), py::arg("catalog") = py::none(),
        "`trainplan job --json`: the whole job of a plan (dict or path): startup, data input, checkpoints, spot "
        "interruptions (closed form and Monte Carlo with runs=, seed=), checkpoint interval study. Keyword "
        "arguments are `trainplan job`'s options with '-' as '_' (step_time, tokens, purchase (\"on-demand\", "
        "\"spot\", \"blend:K\"), platform, runs, seed, deadline, checkpoint_interval, ...). \"plan_with_job\" is "
        "what --write-plan writes. Releases the GIL.");
}

}  // namespace trainplan::python
