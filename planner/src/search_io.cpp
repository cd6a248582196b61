#include "trainplan/planner/search_io.hpp"

#include <span>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/planner/calibrated.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/job.hpp"
#include "trainplan/planner/partition.hpp"

namespace trainplan::planner {
namespace {

// A comma-separated list option; an item's error names the option.
template <typename T, typename F>
std::vector<T> list_of(const std::string& text, const std::string& option, F&& parse) {
  std::vector<T> out;
  if (text.empty()) return out;
  const auto items = split(text, ',');
  if (items.size() > 1000)
    throw Error(fmt::format("lists {} values, more than 1000", items.size())).at(option).hint("give a few values to try");
  for (const auto& item : items) out.push_back(at_flag(option, [&] { return parse(item); }));
  return out;
}

template <typename E>
E choice(const std::string& s, std::span<const E> all, std::string_view (*name)(E), const std::string& flag) {
  std::vector<std::string> names;
  for (E e : all) names.emplace_back(name(e));
  const std::string chosen = flag_choice(flag, s, names);
  for (E e : all)
    if (name(e) == chosen) return e;
  TP_ASSERT(false);
  return all.front();
}
template <typename E>
E choice(const std::string& s, std::initializer_list<E> all, std::string_view (*name)(E), const std::string& flag) {
  return choice(s, std::span<const E>(all.begin(), all.size()), name, flag);
}

// The bounds and choices the CLI's flags declare (cli/src/search_options.cpp: add_int,
// add_choice), for options set without the CLI.
void check_option_values(const SearchOptions& a) {
  if (a.global_batch != 0) flag_in_range("--global-batch", a.global_batch, 1, limits::kMaxBatch);
  if (a.seq_len != 0) flag_in_range("--seq-len", a.seq_len, 1, limits::kMaxSeqLen);
  flag_in_range("--max-gpus", a.max_gpus, 1, kMaxSearchGpus);
  flag_in_range("--max-instances", a.max_instances, 0, limits::kMaxInstances);
  flag_in_range("--azs", a.azs, 1, hw::kMaxAzs);
  flag_choice("--platform", a.platform, {"ec2", "sagemaker"});
  flag_choice("--purchase", a.purchase, {"on-demand", "spot", "both", "capacity-block"});
  flag_in_range("--simulate-top", static_cast<int64_t>(a.simulate_top), 0, limits::kMaxRows);
  flag_in_range("--exact-top", static_cast<int64_t>(a.exact_top), 0, limits::kMaxRows);
  flag_in_range("--spot-runs", static_cast<int64_t>(a.spot_runs), 1, limits::kMaxRuns);
  flag_in_range("--seed", static_cast<int64_t>(a.seed), 0, std::numeric_limits<int64_t>::max());
  flag_in_range("--top", static_cast<int64_t>(a.top), 1, limits::kMaxRows);
  flag_in_range("--threads", a.threads, 0, limits::kMaxThreads);
}

// --tokens, or --samples (per epoch) x --epochs: the request's tokens and, for the latter, its
// samples_per_epoch and epochs.
void work_of(const SearchOptions& a, SearchRequest& req) {
  if (!a.tokens.empty() && !a.samples.empty())
    throw Error("give the work as tokens or as samples x epochs, not both").at("--samples").hint("drop --tokens or --samples");
  if (!a.epochs.empty() && a.samples.empty())
    throw Error("--epochs counts passes over --samples").at("--epochs").hint("add --samples N (the dataset's size), e.g. --samples 1.28M --epochs 90");
  if (a.samples.empty()) {
    if (a.tokens.empty())
      throw Error("the training work is missing").at("--tokens").hint("give --tokens (e.g. 300B) or --samples N --epochs E (e.g. 1.28M and 90)");
    req.tokens = flag_count_of_things("--tokens", a.tokens, "tokens");
    return;
  }
  req.samples_per_epoch = flag_count_of_things("--samples", a.samples, "samples");
  req.epochs = a.epochs.empty() ? 1.0 : flag_positive_quantity("--epochs", a.epochs, units::Dimension::count);
  flag_in_range("--epochs", req.epochs, kMinEpochs, kMaxEpochs);
  double tokens_per_sample = 1;
  if (!req.model.empty()) {
    models::ModelSpec spec = models::resolve_model(req.model);
    if (a.seq_len > 0) models::set_seq_len(spec, a.seq_len, "--seq-len");
    tokens_per_sample = models::build_graph(spec).tokens_per_sample();
  }
  req.tokens = req.samples_per_epoch * req.epochs * tokens_per_sample;
  if (!(req.tokens <= limits::kMaxTokens))
    throw Error(fmt::format("samples x epochs x tokens per sample is {:g} tokens, more than {:g}", req.tokens, limits::kMaxTokens))
        .at("--samples")
        .hint("give fewer samples or epochs");
}

// --capacity-factor (0: dropless, else >= 1) and --load-imbalance (>= 1) of MoE routing.
void parse_moe_routing(const SearchOptions& a, SearchRequest& req) {
  if (!a.capacity_factor.empty()) {
    req.moe_capacity_factor = flag_quantity("--capacity-factor", a.capacity_factor, units::Dimension::count);
    if (!(req.moe_capacity_factor == 0 || (req.moe_capacity_factor >= 1 && req.moe_capacity_factor <= 1e6)))
      throw Error(fmt::format("must be 0 (dropless) or at least 1, got \"{}\"", a.capacity_factor))
          .at("--capacity-factor")
          .hint("an expert takes c x tokens x top_k / experts tokens: c < 1 drops tokens even when balanced; e.g. 1.25");
  }
  if (!a.load_imbalance.empty()) {
    req.moe_load_imbalance = flag_quantity("--load-imbalance", a.load_imbalance, units::Dimension::count);
    if (!(req.moe_load_imbalance >= 1 && req.moe_load_imbalance <= 1e6))
      throw Error(fmt::format("must be at least 1, got \"{}\"", a.load_imbalance))
          .at("--load-imbalance")
          .hint("the busiest expert-parallel rank's tokens over the mean: 1 is perfect balance, e.g. 1.2");
  }
}

}  // namespace

std::string effective_objective(const SearchOptions& a) {
  const bool deadline = !a.deadline.empty(), budget = !a.budget.empty();
  if (a.objective.empty()) {
    if (deadline && budget)
      throw Error("--deadline and --budget both given without an objective")
          .at("--objective")
          .hint("--objective cost-under-deadline (the cheapest plan within the deadline) or time-under-budget (the "
                "fastest within the budget)");
    return deadline ? "cost-under-deadline" : budget ? "time-under-budget" : "time";
  }
  auto unused = [&](const char* flag, const char* objective) {
    return Error(fmt::format("applies to --objective {}; --objective {} would ignore it", objective, a.objective))
        .at(flag)
        .hint(fmt::format("drop {} or use --objective {}", flag, objective));
  };
  if (deadline && a.objective != "cost-under-deadline") throw unused("--deadline", "cost-under-deadline");
  if (budget && a.objective != "time-under-budget") throw unused("--budget", "time-under-budget");
  return a.objective;
}

SearchRequest search_request(const SearchOptions& a) {
  check_option_values(a);
  SearchRequest req;
  req.model = a.model;
  if (!a.model.empty()) {
    const models::ModelSpec spec = at_flag("--model", [&] { return models::resolve_model(a.model); });
    if (spec.layers > kMaxSearchLayers)
      throw Error(fmt::format("{} has {} layers; a search takes models of up to {}", spec.name, spec.layers, kMaxSearchLayers))
          .at("--model")
          .hint("a search's time grows with the layer count; write a plan file and run `trainplan check` or `simulate` on it");
  }
  work_of(a, req);
  req.global_batch = a.global_batch;
  if (!a.global_batch_range.empty()) {
    const auto parts = split(a.global_batch_range, ':');
    if (parts.size() != 2)
      throw Error(fmt::format("takes MIN:MAX, got \"{}\"", a.global_batch_range)).at("--global-batch-range").hint("e.g. 512:2048");
    req.global_batch_min = at_flag("--global-batch-range", [&] { return checked::parse_int(parts[0], 1, limits::kMaxBatch); });
    req.global_batch_max = at_flag("--global-batch-range", [&] { return checked::parse_int(parts[1], 1, limits::kMaxBatch); });
  }
  req.seq_len = a.seq_len;
  req.instance_types = split(a.instances, ',');
  req.instance_counts = list_of<int>(a.counts, "--counts", [](const std::string& s) {
    return static_cast<int>(checked::parse_int(s, 1, limits::kMaxInstances));
  });
  req.max_gpus = static_cast<int>(a.max_gpus);
  req.max_instances = static_cast<int>(a.max_instances);
  req.azs = static_cast<int>(a.azs);
  req.data_region = a.data_region;
  req.software = a.software;
  if (!a.dataset_size.empty()) req.dataset_bytes = flag_positive_quantity("--dataset-size", a.dataset_size, units::Dimension::bytes);
  req.objective = at_flag("--objective", [&] { return parse_objective(effective_objective(a)); });
  if (!a.deadline.empty()) req.deadline_s = flag_positive_quantity("--deadline", a.deadline, units::Dimension::duration);
  if (!a.budget.empty()) {
    std::string b = a.budget;
    if (!b.empty() && b.front() == '$') b.erase(0, 1);
    req.budget_usd = flag_positive_quantity("--budget", b, units::Dimension::count);
  }
  req.platform = a.platform == "sagemaker" ? plan::Platform::sagemaker : plan::Platform::ec2;
  const std::string purchase = a.spot ? "spot" : a.purchase;
  req.both_purchases = purchase == "both";
  req.purchase = purchase == "spot"             ? plan::Purchase::spot
                 : purchase == "capacity-block" ? plan::Purchase::capacity_block
                                                : plan::Purchase::on_demand;
  if (!a.micro_batches.empty())
    req.micro_batches = list_of<int64_t>(a.micro_batches, "--micro-batches", [](const std::string& s) { return checked::parse_int(s, 1, limits::kMaxBatch); });
  if (!a.zero.empty())
    req.zero_stages = list_of<int>(a.zero, "--zero", [](const std::string& s) {
      return static_cast<int>(checked::parse_int(s, 0, 3));
    });
  const auto degrees = [](const std::string& text, const char* flag) {
    return list_of<int>(text, flag, [](const std::string& s) { return static_cast<int>(checked::parse_int(s, 1, kMaxSearchGpus)); });
  };
  req.tp_degrees = degrees(a.tp, "--tp");
  req.pp_degrees = degrees(a.pp, "--pp");
  req.dp_degrees = degrees(a.dp, "--dp");
  req.data_source = at_flag("--data-input", [&] { return sim::parse_data_source(a.data_input); });
  if (!a.recompute.empty())
    req.recomputes = list_of<plan::Recompute>(a.recompute, "--recompute", [](const std::string& s) {
      return choice(s, {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}, plan::recompute_name, "--recompute");
    });
  if (!a.schedules.empty())
    req.schedules = list_of<plan::Schedule>(a.schedules, "--schedules", [](const std::string& s) {
      return choice(s, {plan::Schedule::gpipe, plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b}, plan::schedule_name, "--schedules");
    });
  if (!a.virtual_stages.empty())
    req.virtual_stages = list_of<int>(a.virtual_stages, "--vp", [](const std::string& s) { return static_cast<int>(checked::parse_int(s, 1, limits::kMaxLayers)); });
  if (!a.context_parallel.empty())
    req.context_parallel = list_of<int>(a.context_parallel, "--cp", [](const std::string& s) { return static_cast<int>(checked::parse_int(s, 1, limits::kMaxGpus)); });
  if (!a.expert_parallel.empty())
    req.expert_parallel = list_of<int>(a.expert_parallel, "--ep", [](const std::string& s) { return static_cast<int>(checked::parse_int(s, 1, limits::kMaxGpus)); });
  parse_moe_routing(a, req);
  if (!a.dp_algorithms.empty())
    req.dp_algorithms = list_of<plan::DpAlgorithm>(a.dp_algorithms, "--dp-algorithms", [](const std::string& s) {
      return choice(s, std::span<const plan::DpAlgorithm>(plan::kDpAlgorithms),
                    plan::dp_algorithm_name, "--dp-algorithms");
    });
  if (!a.bucket_sizes.empty())
    req.bucket_sizes_bytes = list_of<double>(a.bucket_sizes, "--bucket-sizes", [](const std::string& s) { return flag_positive_quantity("--bucket-sizes", s, units::Dimension::bytes); });
  req.sequence_parallel = !a.no_sequence_parallel;
  req.sync_batch_norm = a.sync_bn;
  if (a.sync_bn && !a.model.empty()) {
    const models::ModelGraph graph = models::build_graph(models::resolve_model(a.model));
    if (std::none_of(graph.ops().begin(), graph.ops().end(), [](const models::Op& op) { return op.kind == models::OpKind::batchnorm; }))
      throw Error(fmt::format("{} has no batch-norm layers to synchronize", a.model)).at("--sync-bn").hint("drop --sync-bn");
  }
  if (!a.precision.empty()) req.precision = parse_precision(flag_choice("--precision", a.precision, precision_names()));
  if (!a.fp8_recipe.empty()) {
    if (req.precision != Precision::fp8)
      throw Error("an FP8 recipe without FP8 training").at("--fp8-recipe").hint("add --precision fp8, or drop --fp8-recipe");
    req.fp8.recipe = choice(a.fp8_recipe, std::span<const plan::Fp8Recipe>(plan::kFp8Recipes), plan::fp8_recipe_name, "--fp8-recipe");
  }
  req.allow_tp_across_nodes = a.tp_across_nodes;
  req.partition = at_flag("--partition", [&] { return parse_partition_mode(a.partition); });
  if (!a.framework.empty()) req.framework = at_flag("--for", [&] { return parse_export_target(a.framework); });
  req.simulate_top = a.simulate_top;
  req.exact_top = std::max<size_t>(1, std::max(a.exact_top, a.top));
  req.spot_runs = a.spot_runs;
  req.spot_rows = a.top;
  req.seed = a.seed;
  req.threads = static_cast<int>(a.threads);
  load_calibration_profiles(req, a.calibration);
  for (const auto& stage : a.off) {
    if (stage == "partition") req.stages.partition = false;
    else if (stage == "prune-memory") req.stages.prune_memory = false;
    else if (stage == "expand") req.stages.expand = false;
    else if (stage == "lazy") req.stages.lazy = false;
    else if (stage == "checks") req.stages.check_invariants = false;
    else if (stage == "memo") req.stages.memo = false;
    else
      flag_choice("--off", stage, {"partition", "prune-memory", "expand", "lazy", "checks", "memo"});
  }
  return req;
}

double ranked_mfu(const Candidate& c) { return c.step.mfu * c.step.step_time_s / c.step_time_s(); }

json::Json predicted_json(const Candidate& c) {
  json::Json j = {{"source", c.simulated ? "simulated" : "analytical"},
                  {"step_time_s", c.step_time_s()},
                  {"analytical_step_time_s", c.step.step_time_s},
                  {"steps", c.steps},
                  {"time_to_train_s", c.time_to_train_s},
                  {"mfu", ranked_mfu(c)},
                  {"tokens_per_s", c.step.tokens_per_s * c.step.step_time_s / c.step_time_s()},
                  {"peak_memory_bytes", c.memory.total_bytes()},
                  {"gpu_memory_capacity_bytes", c.memory.capacity_bytes}};
  if (c.simulated) j["simulated_step_time_s"] = c.simulated->step_time_s;
  if (c.cost_on_demand_usd) j["cost_on_demand_usd"] = *c.cost_on_demand_usd;
  if (c.cost_spot_usd) j["cost_spot_no_interruptions_usd"] = *c.cost_spot_usd;
  for (const auto* job : {&c.on_demand_job, &c.spot_job}) {
    if (!*job) continue;
    const std::string k = (*job)->purchase == plan::Purchase::spot ? "spot_job" : "on_demand_job";
    j[k] = {{"expected_time_s", (*job)->expected_time_s},
            {"expected_cost_usd", (*job)->expected_cost_usd},
            {"expected_interruptions", (*job)->expected_interruptions},
            {"checkpoint_interval_s", (*job)->checkpoint_interval_s}};
    if ((*job)->cost_usd) {
      j[k]["cost_p50_usd"] = (*job)->cost_usd->p50;
      j[k]["cost_p90_usd"] = (*job)->cost_usd->p90;
      j[k]["time_p50_s"] = (*job)->time_s->p50;
      j[k]["time_p90_s"] = (*job)->time_s->p90;
    }
  }
  return j;
}

plan::Plan best_plan(const SearchResult& result) {
  TP_ASSERT(!result.ranked.empty());
  const auto& best = result.ranked.front();
  plan::Plan out = best.plan;
  out.predicted = predicted_json(best);
  return out;
}

json::Json candidates_json(const SearchResult& result) {
  json::Json all = json::Json::array();
  for (size_t i = 0; i < result.ranked.size(); ++i) {
    const auto& c = result.ranked[i];
    json::Json j = plan::to_json(c.plan);
    j["predicted"] = predicted_json(c);
    j["rank"] = i + 1;
    j["pareto"] = std::find(result.pareto.begin(), result.pareto.end(), i) != result.pareto.end();
    all.push_back(j);
  }
  return all;
}

json::Json search_summary_json(const SearchResult& r) {
  json::Json j;
  j["global_batch"] = r.global_batch;
  j["seq_len"] = r.seq_len;
  j["enumerated"] = r.enumerated;
  j["cancelled"] = r.cancelled;
  const auto& k = r.counts;
  j["counts"] = {{"enumerated", k.enumerated},
                 {"families", k.families},
                 {"memory_evaluations", k.memory_evaluations},
                 {"inferred_out_of_memory", k.inferred_out_of_memory},
                 {"repartitioned", k.repartitioned},
                 {"partitions_computed", k.partitions_computed},
                 {"analytical", k.analytical},
                 {"expanded", k.expanded},
                 {"expansion_skipped", k.expansion_skipped},
                 {"job_evaluations", k.job_evaluations},
                 {"simulated", k.simulated}};
  j["dropped"] = r.dropped;
  json::Json stages = json::Json::array();
  for (const auto& s : r.stages)
    stages.push_back({{"name", s.name}, {"seconds", s.seconds}, {"kept", s.kept}, {"note", s.note}, {"enabled", s.enabled}});
  j["stages"] = stages;
  j["pareto"] = r.pareto;
  j["rank_correlation"] = r.rank_correlation ? json::Json(*r.rank_correlation) : json::Json(nullptr);
  return j;
}

Error nothing_fits_error(const SearchResult& result, const SearchRequest& req) {
  // Nothing fits: say how far the closest attempt was, and what would work.
  std::string detail;
  double best_ratio = 1e300;
  const SearchResult::Closest* best = nullptr;
  for (const auto& c : result.closest) {
    double r = c.needed_bytes / c.capacity_bytes;
    if (r < best_ratio) {
      best_ratio = r;
      best = &c;
    }
  }
  std::string hint = "allow more GPUs (--max-gpus) or instance types with more GPU memory";
  if (best) {
    const auto& p = best->plan;
    detail = fmt::format(": the closest, {} x {} with dp/tp/pp {}/{}/{}{}, ZeRO-{}, {} recomputation, micro-batch {}, needs {} per GPU; "
                         "the GPU has {}",
                         p.instance_count, p.instance_type, p.dp, p.tp, p.pp, (p.cp > 1 ? fmt::format(" x cp {}", p.cp) : std::string()) + (p.ep > 1 ? fmt::format(", ep {}", p.ep) : ""),
                         p.zero_stage, plan::recompute_name(p.recompute),
                         p.micro_batch, units::format_bytes(best->needed_bytes), units::format_bytes(best->capacity_bytes));
  }
  return Error(fmt::format("no plan for {} fits in GPU memory within {} GPUs{}", models::resolve_model(req.model).name, req.max_gpus, detail))
      .hint(hint);
}

}  // namespace trainplan::planner
