// Validation against published measurements. See validate.hpp.
#include "trainplan/calibration/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/core/thread_pool.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace trainplan::calibration {
namespace {

using json::Json;

std::optional<double> num(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}
std::string str(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}
bool contains(const std::string& hay, std::string_view needle) { return to_lower(hay).find(to_lower(needle)) != std::string::npos; }

// Which catalog cluster a point's hardware is. Empty + reason when none fits.
std::string map_cluster(const Json& hw, const hw::Catalog& catalog, int num_gpus, std::vector<std::string>& assumptions,
                        std::string& reason) {
  const std::string gpu = str(hw, "gpu");
  const std::string inter = str(hw, "inter_node");
  const std::string system = str(hw, "system");
  const bool single_node = num_gpus <= 8;
  std::string name;
  if (contains(gpu, "H100")) {
    if (contains(inter, "EFA") || contains(system, "p5.48xlarge")) name = "p5.48xlarge";
    else if (contains(inter, "NDR") || contains(system, "DGX H100") || (single_node && inter.empty())) name = "dgx-h100";
  } else if (contains(gpu, "A100")) {
    const bool gb80 = contains(gpu, "80") || num(hw, "gpu_mem_gb").value_or(0) >= 80;
    if (contains(inter, "EFA") || contains(system, "p4d")) {
      name = gb80 ? "p4de.24xlarge" : "p4d.24xlarge";
    } else if (contains(inter, "4x HDR") || contains(inter, "4x 200") || contains(system, "4x HDR")) {
      reason = "4 x 200 Gb/s per node: no catalog cluster has that network (DGX A100 has 8 x 200 Gb/s)";
      return "";
    } else if (contains(inter, "HDR") || contains(inter, "1600") || contains(inter, "RoCE") || contains(system, "DGX A100") ||
               contains(system, "Selene")) {
      name = gb80 ? "dgx-a100-80gb" : "dgx-a100-40gb";
    } else if (single_node && (contains(system, "NVSwitch") || contains(gpu, "SXM"))) {
      name = gb80 ? "dgx-a100-80gb" : "dgx-a100-40gb";
      assumptions.push_back(fmt::format("single 8-GPU A100 NVSwitch node ({}) modelled as a {} node", system, name));
    }
    if (contains(gpu, "unverified")) assumptions.push_back("GPU variant marked unverified by the source");
  } else if (contains(gpu, "V100")) {
    if (contains(gpu, "SXM3") || contains(system, "DGX-2")) {
      reason = "DGX-2 (16 V100 SXM3 on NVSwitch) is not in the catalog";
      return "";
    }
    if (contains(system, "p3dn") || (contains(inter, "100 Gbps") && contains(inter, "EFA"))) name = "p3dn.24xlarge";
    else if (contains(system, "p3.16xlarge") || contains(inter, "p3.16xlarge")) name = "p3.16xlarge";
  }
  if (name.empty()) {
    reason = fmt::format("no catalog cluster for {} with \"{}\"", gpu.empty() ? "an unknown GPU" : gpu,
                         inter.empty() ? system : inter);
    return "";
  }
  const auto& inst = catalog.instance(name);
  if (num_gpus % inst.gpu_count != 0) {
    reason = fmt::format("{} GPUs is not a whole number of {} instances ({} GPUs each)", num_gpus, name, inst.gpu_count);
    return "";
  }
  return name;
}

// The catalog model with the point's shape.
std::string map_model(const Json& m, std::string& reason) {
  auto get = [&](const char* key) { return static_cast<int64_t>(num(m, key).value_or(0)); };
  const int64_t layers = get("layers"), hidden = get("hidden"), heads = get("heads");
  if (!layers || !hidden || !heads) {
    reason = "the model's layers / hidden / heads are not given";
    return "";
  }
  const int64_t kv = get("kv_heads") ? get("kv_heads") : heads;
  std::string best;
  for (const auto& s : models::ModelCatalog::builtin().specs()) {
    if (s.layers != layers || s.hidden != hidden || s.heads != heads || s.kv_heads != kv) continue;
    if (get("vocab") && s.vocab != get("vocab")) continue;
    if (get("ffn_hidden") && s.ffn_hidden != get("ffn_hidden")) continue;
    if (best.empty() || (get("seq_len") && s.seq_len == get("seq_len"))) best = s.name;
  }
  if (best.empty()) reason = fmt::format("no catalog model with {} layers, hidden {}, {} heads", layers, hidden, heads);
  return best;
}

// The measured step time of a training point and how it was obtained.
std::optional<double> measured_step(const Json& point, const plan::Plan& p, int64_t seq, int gpus, std::string& how) {
  const Json& x = point["metrics"];
  const Json& m = point["model"];
  if (auto t = num(x, "step_time_s")) {
    how = "step time as published";
    return *t;
  }
  const double tokens = static_cast<double>(p.global_batch) * static_cast<double>(seq);
  if (auto r = num(x, "tokens_per_s")) {
    how = "global batch tokens / published tokens per second";
    return tokens / *r;
  }
  if (auto r = num(x, "samples_per_s")) {
    how = "global batch / published samples per second";
    return static_cast<double>(p.global_batch) / *r;
  }
  if (auto tf = num(x, "tflops_per_gpu")) {
    const std::string kind = str(x, "tflops_kind");
    if (contains(kind, "96Bslh")) {
      // Narayanan et al. 2021, eq. 3 (counts the recomputed forward).
      const double B = static_cast<double>(p.global_batch), s = static_cast<double>(seq), l = *num(m, "layers"),
                   h = *num(m, "hidden"), V = num(m, "vocab").value_or(51200);
      const double F = 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
      how = "published TFLOP/s per GPU converted with the source's F = 96Bslh^2(1 + s/6h + V/16lh)";
      return F / (*tf * 1e12 * gpus);
    }
  }
  return std::nullopt;
}

void map_training(const Json& point, const hw::Catalog& catalog, const ValidationOptions& options, ValidationPoint& vp) {
  const Json& m = point["model"];
  const Json& q = point["parallelism"];
  const Json& hwj = point["hardware"];
  const int gpus = static_cast<int>(num(hwj, "num_gpus").value_or(0));
  if (gpus <= 0) {
    vp.reason = "the number of GPUs is not given";
    return;
  }
  if (num(q, "ep").value_or(1) > 1) {
    vp.reason = "expert parallelism is not modelled";
    return;
  }
  std::string model = map_model(m, vp.reason);
  if (model.empty()) return;
  std::string cluster = map_cluster(hwj, catalog, gpus, vp.assumptions, vp.reason);
  if (cluster.empty()) return;
  const auto& inst = catalog.instance(cluster);
  plan::Plan p;
  p.model = model;
  p.instance_type = cluster;
  p.instance_count = gpus / inst.gpu_count;
  p.tp = static_cast<int>(num(q, "tp").value_or(1));
  p.pp = static_cast<int>(num(q, "pp").value_or(1));
  // Context parallelism (Megatron-core / NeMo's context_parallel_size); a published dp counts
  // replicas without it, as Megatron's data-parallel size does.
  p.cp = std::max(1, static_cast<int>(num(q, "cp").value_or(1)));
  p.dp = num(q, "dp") ? static_cast<int>(*num(q, "dp")) : gpus / (p.tp * p.pp * p.cp);
  if (!num(q, "tp") || !num(q, "pp")) vp.assumptions.push_back("unstated tp/pp taken as 1");
  const auto gb = num(q, "global_batch");
  if (!gb) {
    vp.reason = "the global batch is not given";
    return;
  }
  p.global_batch = static_cast<int64_t>(*gb);
  if (auto mb = num(q, "micro_batch")) {
    p.micro_batch = static_cast<int64_t>(*mb);
  } else {
    p.micro_batch = 1;
    vp.assumptions.push_back("micro-batch size not given: 1 assumed");
  }
  p.seq_len = static_cast<int64_t>(num(m, "seq_len").value_or(0));
  const std::string fsdp = str(q, "fsdp");
  if (contains(fsdp, "FULL_SHARD")) p.zero_stage = 3;
  else if (contains(fsdp, "SHARD_GRAD_OP")) p.zero_stage = 2;
  else if (auto z = num(q, "zero_stage")) p.zero_stage = static_cast<int>(*z);
  else if (contains(str(point["source"], "title"), "NeMo") && p.dp * p.cp > 1) {
    // NeMo's Megatron-core recipes shard the optimizer state over the data-parallel ranks
    // (use_distributed_optimizer): ZeRO-1.
    p.zero_stage = 1;
    vp.assumptions.push_back("optimizer sharding not stated: ZeRO-1 (NeMo's distributed optimizer)");
  }
  const std::string rc = str(q, "activation_recompute");
  if (contains(rc, "full")) p.recompute = plan::Recompute::full;
  else if (contains(rc, "selective")) p.recompute = plan::Recompute::selective;
  else p.recompute = plan::Recompute::none;
  if (rc.empty()) vp.assumptions.push_back("recomputation not stated: none assumed");
  if (q.contains("sequence_parallel") && q["sequence_parallel"].is_boolean()) {
    p.sequence_parallel = q["sequence_parallel"].get<bool>() && p.tp > 1;
  } else if (p.tp > 1 && contains(str(point["source"], "title"), "NeMo")) {
    p.sequence_parallel = true;
    vp.assumptions.push_back("sequence parallelism not stated: on (NeMo's default with tp > 1)");
  }
  if (auto v = num(q, "vp_interleave"); v && *v > 1) {
    p.vp = static_cast<int>(*v);
    p.schedule = plan::Schedule::interleaved_1f1b;
  }
  // Attention: fused (flash) where the source says so or from 2023 on (FlashAttention-2,
  // cuDNN fused attention and PyTorch SDPA are the defaults of every framework since); the
  // score matrix in memory before (Megatron-LM 2020-2021).
  const std::string arch = str(m, "arch_notes");
  const std::string date = str(point["source"], "date");
  const int year = date.size() >= 4 && std::isdigit(static_cast<unsigned char>(date[0])) ? std::stoi(date.substr(0, 4)) : 0;
  if (contains(arch, "flash")) {
    p.attention = plan::AttentionImpl::flash;
  } else if (year >= 2023) {
    p.attention = plan::AttentionImpl::flash;
    vp.assumptions.push_back("attention implementation not stated: fused (flash), the default since 2023");
  } else {
    p.attention = plan::AttentionImpl::unfused;
    vp.assumptions.push_back("attention implementation not stated: unfused (scores in memory), as Megatron-LM before 2022");
  }
  const std::string prec = to_lower(point.value("precision", ""));
  if (contains(prec, "fp8")) p.precision = Precision::fp8;
  else if (contains(prec, "bf16")) p.precision = Precision::bf16;
  else if (contains(prec, "fp16")) p.precision = Precision::fp16;
  vp.cluster = fmt::format("{} x {}", p.instance_count, cluster);
  vp.setup = fmt::format("{} seq {} gb {} mb {} tp{} pp{}{}{} dp{} zero{} {}{} {} {}", model, p.seq_len, p.global_batch,
                         p.micro_batch, p.tp, p.pp, p.vp > 1 ? fmt::format(" vp{}", p.vp) : "",
                         p.cp > 1 ? fmt::format(" cp{}", p.cp) : "", p.dp, p.zero_stage,
                         plan::recompute_name(p.recompute), p.sequence_parallel ? " sp" : "",
                         p.precision ? precision_name(*p.precision) : "", plan::attention_impl_name(p.attention));
  plan::PlanContext ctx = [&] {
    try {
      return plan::resolve(p, catalog, vp.id);
    } catch (const Error& e) {
      vp.reason = fmt::format("cannot build the plan: {}", e.what());
      throw;
    }
  }();
  if (auto problem = plan::check(p, ctx)) {
    vp.reason = fmt::format("the published configuration is not a valid plan here: {}", *problem);
    return;
  }
  std::string how;
  auto measured = measured_step(point, p, ctx.seq_len, gpus, how);
  if (!measured) {
    vp.reason = "no step time, tokens/s or convertible TFLOP/s is given";
    return;
  }
  vp.mapped = true;
  vp.metric = "step_time_s";
  vp.measured = *measured;
  vp.measured_from = how;
  vp.fits_memory = plan::peak_memory(p, ctx).fits();
  sim::PlanSimOptions so;
  so.sim.calibration = options.calibration;
  so.sim.record_timeline = false;
  so.memory_events = false;
  const auto sim = sim::simulate_plan(p, ctx, so);
  vp.predicted = sim.step.step_time_s;
  vp.error = vp.predicted / vp.measured - 1.0;
  if (options.analytical_step_s) {
    vp.predicted_analytical = options.analytical_step_s(p, ctx);
    vp.error_analytical = vp.predicted_analytical / vp.measured - 1.0;
  }
  const double model_flops = ctx.graph.training_flops_per_sample() * static_cast<double>(p.global_batch);
  vp.model_tflops_measured = model_flops / (vp.measured * gpus) / 1e12;
  vp.model_tflops_predicted = model_flops / (vp.predicted * gpus) / 1e12;
}

void map_collective(const Json& point, const hw::Catalog& catalog, const ValidationOptions& options, ValidationPoint& vp) {
  const Json& other = point["metrics"]["other"];
  const std::string coll = str(other, "collective");
  plan::CollectiveKind kind;
  double factor_num = 2.0;  // busbw = algbw * factor_num * (n - 1) / n
  if (coll == "all_reduce") kind = plan::CollectiveKind::all_reduce;
  else if (coll == "all_gather") kind = plan::CollectiveKind::all_gather, factor_num = 1.0;
  else if (coll == "reduce_scatter") kind = plan::CollectiveKind::reduce_scatter, factor_num = 1.0;
  else {
    vp.reason = fmt::format("collective \"{}\" is not modelled", coll);
    return;
  }
  const auto size = num(other, "message_bytes");
  if (!size) {
    vp.reason = "the message size is not given";
    return;
  }
  const int n = static_cast<int>(num(point["hardware"], "num_gpus").value_or(0));
  if (n < 2) {
    vp.reason = "fewer than 2 GPUs";
    return;
  }
  std::string cluster = map_cluster(point["hardware"], catalog, n, vp.assumptions, vp.reason);
  if (cluster.empty()) return;
  const double factor = factor_num * (n - 1.0) / n;
  double measured_busbw = 0;
  if (auto b = num(other, "busbw_GBps")) {
    measured_busbw = *b;
    vp.measured_from = "busbw as published";
  } else if (auto a = num(other, "algbw_GBps")) {
    measured_busbw = *a * factor;
    vp.measured_from = "published algbw x the nccl-tests bus factor";
  } else {
    vp.reason = "neither busbw nor algbw is given";
    return;
  }
  const auto& inst = catalog.instance(cluster);
  const int count = n / inst.gpu_count;
  hw::Cluster cl = hw::Cluster::build(inst, count, catalog);
  plan::StepProgram prog;
  prog.world_size = n;
  prog.dp = n;
  prog.streams = {"comm"};
  plan::Group g;
  g.id = 0;
  g.purpose = plan::CommPurpose::none;
  for (int r = 0; r < n; ++r) g.ranks.push_back(r);
  prog.groups.push_back(g);
  for (int r = 0; r < n; ++r) {
    plan::RankProgram rp;
    rp.rank = r;
    rp.gpu = r;
    rp.dp_rank = r;
    plan::Task t;
    t.id = 0;
    t.kind = plan::TaskKind::collective;
    t.collective = kind;
    t.group = 0;
    t.bytes = *size;
    t.comm_id = 0;
    t.label = coll;
    rp.tasks.push_back(t);
    prog.ranks.push_back(std::move(rp));
  }
  prog.symmetry_class.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) prog.symmetry_class[static_cast<size_t>(r)] = r;
  sim::SimOptions so;
  so.record_timeline = false;
  so.calibration = options.calibration;
  const auto res = sim::simulate_step(prog, cl, so);
  vp.cluster = fmt::format("{} x {}", count, cluster);
  vp.setup = fmt::format("{} of {} on {} GPUs", coll, units::format_bytes(*size), n);
  vp.mapped = true;
  vp.metric = "busbw_GBps";
  vp.measured = measured_busbw;
  vp.predicted = *size / res.step_time_s * factor / 1e9;
  vp.error = vp.predicted / vp.measured - 1.0;
}

void summarize(const std::vector<const ValidationPoint*>& pts, SourceSummary& s) {
  double abs_sum = 0, abs_an = 0, abs_tp = 0, signed_sum = 0;
  int n = 0, n_an = 0;
  for (const auto* p : pts) {
    if (!p->mapped) {
      ++s.unmapped;
      continue;
    }
    ++n;
    abs_sum += std::fabs(p->error);
    signed_sum += p->error;
    if (p->metric == "step_time_s") {
      abs_tp += std::fabs(p->measured / p->predicted - 1.0);
      abs_an += std::fabs(p->error_analytical);
      ++n_an;
    }
  }
  s.points = n;
  if (n) {
    s.mape = abs_sum / n;
    s.mean_error = signed_sum / n;
  }
  if (n_an) {
    s.mape_analytical = abs_an / n_an;
    s.mape_throughput = abs_tp / n_an;
  }
}

}  // namespace

ValidationReport validate_published_json(const json::Json& doc, const std::string& name, const hw::Catalog& catalog,
                                         const ValidationOptions& options) {
  json::Reader r(doc, name);
  const auto points = r.field("data_points").items();
  ValidationReport report;
  report.file = name;
  report.analytical = static_cast<bool>(options.analytical_step_s);
  std::vector<const Json*> selected;
  for (const auto& p : points) {
    if (!p.is_object()) throw p.error("a data point must be an object");
    const std::string id = str(p.value(), "id");
    if (!options.filter.empty() && id.find(options.filter) == std::string::npos) continue;
    selected.push_back(&p.value());
  }
  report.points.resize(selected.size());
  ThreadPool pool(static_cast<size_t>(std::max(0, options.threads)));
  pool.parallel_for(selected.size(), [&](size_t i) {
    const Json& point = *selected[i];
    ValidationPoint& vp = report.points[i];
    vp.id = str(point, "id");
    vp.kind = str(point, "kind");
    vp.source = str(point["source"], "title");
    vp.locator = str(point["source"], "locator");
    vp.verification = str(point, "verification");
    try {
      if (vp.kind == "training_throughput") map_training(point, catalog, options, vp);
      else if (vp.kind == "collective_benchmark") map_collective(point, catalog, options, vp);
      else vp.reason = fmt::format("kind \"{}\" is not a per-step throughput or collective measurement", vp.kind);
    } catch (const Error& e) {
      vp.mapped = false;
      if (vp.reason.empty()) vp.reason = e.what();
    }
  });
  // Per source, in the order sources first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ValidationPoint*>> by_source;
  std::vector<const ValidationPoint*> training, collectives;
  for (const auto& p : report.points) {
    if (!by_source.count(p.source)) order.push_back(p.source);
    by_source[p.source].push_back(&p);
    if (p.kind == "training_throughput") training.push_back(&p);
    if (p.kind == "collective_benchmark") collectives.push_back(&p);
  }
  for (const auto& src : order) {
    SourceSummary s;
    s.title = src;
    summarize(by_source[src], s);
    for (const auto* p : by_source[src])
      if (p->mapped) s.metric = p->metric;
    report.sources.push_back(s);
  }
  report.training.title = "all training points (step time)";
  report.training.metric = "step_time_s";
  summarize(training, report.training);
  report.collectives.title = "all collective benchmarks (bus bandwidth)";
  report.collectives.metric = "busbw_GBps";
  summarize(collectives, report.collectives);
  return report;
}

ValidationReport validate_published(const std::string& path, const hw::Catalog& catalog, const ValidationOptions& options) {
  return validate_published_json(json::parse_file(path), path, catalog, options);
}

json::Json to_json(const ValidationReport& r) {
  auto summary = [&r](const SourceSummary& s) {
    Json j = {{"title", s.title}, {"metric", s.metric}, {"points", s.points}, {"unmapped", s.unmapped}, {"mape", s.mape},
              {"mean_error", s.mean_error}};
    if (s.metric == "step_time_s") {
      j["mape_throughput"] = s.mape_throughput;
      if (r.analytical) j["mape_analytical"] = s.mape_analytical;
    }
    return j;
  };
  Json j;
  j["file"] = r.file;
  j["convention"] =
      "training points compare step time (s per optimizer step); published TFLOP/s are converted back with the source's own "
      "FLOP formula, tokens/s with the global batch; model TFLOP/s per GPU use 6N + attention per token without recomputation. "
      "Collectives compare nccl-tests busbw. error = predicted / measured - 1.";
  j["training"] = summary(r.training);
  j["collectives"] = summary(r.collectives);
  Json sources = Json::array();
  for (const auto& s : r.sources) sources.push_back(summary(s));
  j["sources"] = sources;
  Json points = Json::array();
  for (const auto& p : r.points) {
    Json q = {{"id", p.id}, {"kind", p.kind}, {"source", p.source}, {"mapped", p.mapped}};
    if (!p.mapped) {
      q["reason"] = p.reason;
    } else {
      q["cluster"] = p.cluster;
      q["setup"] = p.setup;
      q["metric"] = p.metric;
      q["measured_from"] = p.measured_from;
      q["measured"] = p.measured;
      q["predicted"] = p.predicted;
      q["error"] = p.error;
      if (p.metric == "step_time_s") {
        if (r.analytical) {
          q["predicted_analytical"] = p.predicted_analytical;
          q["error_analytical"] = p.error_analytical;
        }
        q["model_tflops_per_gpu_measured"] = p.model_tflops_measured;
        q["model_tflops_per_gpu_predicted"] = p.model_tflops_predicted;
        q["fits_memory"] = p.fits_memory;
      }
    }
    if (!p.assumptions.empty()) q["assumptions"] = p.assumptions;
    points.push_back(q);
  }
  j["points"] = points;
  return j;
}

}  // namespace trainplan::calibration
