// Calibration microbenchmarks (cuda_benchmarks.hpp): the executor's kernels on the ops of
// catalog models, timed with CUDA events, and NCCL collectives over message sizes.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/executor/cuda_benchmarks.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/op_cost.hpp"

namespace trainplan::executor {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Seconds per call of `fn` on `stream`: warm-up calls, then `repeats` calls between events.
double time_calls(Backend& be, Stream& s, int warmup, int repeats, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  auto start = be.create_event(), stop = be.create_event();
  be.record(*start, s);
  for (int i = 0; i < repeats; ++i) fn();
  be.record(*stop, s);
  return be.elapsed_s(*start, *stop) / repeats;
}

// Tensors of random values (the values do not matter for timing, only that they are finite and
// not all alike). One period of 2^20 normal draws repeats over the tensor: drawing every element
// took minutes of host time for the catalog models' largest tensors (the logits of a 50k
// vocabulary at 8192 tokens are 412M elements).
Tensor random_tensor(Backend& be, Stream& s, DType t, const Shape& shape, Rng& rng, double stddev = 1.0) {
  Tensor x = be.empty(t, shape);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  const size_t period = std::min<size_t>(v.size(), size_t{1} << 20);
  for (size_t i = 0; i < period; ++i) v[i] = rng.normal(0.0, stddev);
  for (size_t i = period; i < v.size(); ++i) v[i] = v[i - period];
  be.upload_values(s, x, v);
  return x;
}
Tensor random_ids(Backend& be, Stream& s, int64_t n, int64_t vocab, Rng& rng) {
  Tensor x = be.empty(DType::i32, {n});
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& e : v) e = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  be.upload_ids(s, x, v);
  return x;
}

}  // namespace

const hw::GpuSpec* match_catalog_gpu(const hw::Catalog& catalog, const std::string& device_name,
                                     const std::string& compute_capability, double memory_bytes) {
  const std::vector<std::string> device_words = words(device_name);
  const hw::GpuSpec* best = nullptr;
  double best_gap = 0;
  int best_shared = -1;
  for (const auto& [name, gpu] : catalog.gpus()) {
    if (gpu.compute_capability != compute_capability) continue;
    const double gap = std::abs(gpu.memory_bytes - memory_bytes) / std::max(gpu.memory_bytes, 1.0);
    int shared = 0;
    for (const std::string& w : words(name))
      if (std::find(device_words.begin(), device_words.end(), w) != device_words.end()) ++shared;
    // Memory decides unless two sizes are within 10% of each other; then the name does.
    const bool better = !best || gap < best_gap - 0.1 || (std::abs(gap - best_gap) <= 0.1 && shared > best_shared);
    if (better) {
      best = &gpu;
      best_gap = gap;
      best_shared = shared;
    }
  }
  return best;
}

const hw::GpuSpec* catalog_gpu_of(const CudaDeviceInfo& device) {
  return match_catalog_gpu(hw::Catalog::builtin(), device.name, device.compute_capability(), device.memory_bytes);
}

double nccl_bus_factor(std::string_view collective, int ranks) {
  if (ranks < 1) throw Error(fmt::format("nccl_bus_factor: {} ranks", ranks));
  const double n = ranks;
  if (collective == "all_reduce") return 2.0 * (n - 1.0) / n;
  if (collective == "all_gather" || collective == "reduce_scatter") return (n - 1.0) / n;
  if (collective == "broadcast" || collective == "reduce") return 1.0;
  throw Error(fmt::format("nccl_bus_factor: unknown collective \"{}\"", collective))
      .hint("all_reduce, all_gather, reduce_scatter, broadcast, reduce");
}

double model_flops_utilization(double flops, double seconds, double peak_flops_per_s) {
  if (!(seconds > 0) || !(peak_flops_per_s > 0)) return 0;
  return flops / (seconds * peak_flops_per_s);
}

namespace {

// One calibration run: the backend, the measured points and table entries, and one timing
// routine per op kind (each op shape is timed once).
class ComputeCalibration {
 public:
  ComputeCalibration(Backend& gpu, const CalibrationOptions& options, const CudaDeviceInfo& info,
                     const hw::GpuSpec* spec_gpu, DType dt)
      : gpu_(gpu), s_(gpu.default_stream()), rng_(2024), dt_(dt), wu_(options.warmup), rep_(options.repeats),
        micro_batch_(options.micro_batch) {
    const Precision precision = dt == DType::bf16 ? Precision::bf16 : dt == DType::f16 ? Precision::fp16 : Precision::fp32;
    precision_ = precision;
    result_.gpu = spec_gpu ? spec_gpu->name : "";
    result_.precision = std::string(precision_name(precision));
    peak_ = spec_gpu && spec_gpu->supports(precision) ? spec_gpu->peak_flops_per_s(precision) : 0.0;
    hbm_ = spec_gpu ? spec_gpu->memory_bandwidth_bytes_per_s : 0.0;
    if (!spec_gpu)
      result_.notes.push_back(fmt::format("{} (sm {}) is not in the catalog: only GEMM durations are written", info.name,
                                          info.compute_capability()));
  }

  void model(const std::string& model_name, int64_t max_seq_len) {
    models::ModelSpec spec = models::ModelCatalog::builtin().spec(model_name);
    spec.seq_len = std::min(spec.seq_len, max_seq_len);
    const models::ModelGraph graph = models::build_graph(spec);
    const plan::AttentionImpl impl = attention_impl(spec);
    for (const models::Op& op : graph.ops()) {
      const plan::OpCost cost = plan::op_cost(op, micro_batch_, 1, false, precision_, impl);
      if (op.kind == models::OpKind::linear) {
        linear(model_name, op, cost);
        continue;
      }
      std::string shape;
      const std::optional<double> seconds = other_op(model_name, spec, graph, op, cost, shape);
      if (!seconds) continue;
      point(model_name, op.name, std::string(models::op_kind_name(op.kind)), shape, cost.flops_fwd, cost.mem_fwd_bytes,
            *seconds);
      if (op.kind != models::OpKind::attention && hbm_ > 0 && cost.mem_fwd_bytes > 0) {
        json::Json e;
        e["op_kind"] = std::string(models::op_kind_name(op.kind));
        e["memory_efficiency"] = clamp_efficiency(cost.mem_fwd_bytes / (*seconds * hbm_), model_name + " " + op.name);
        entries_.push_back(std::move(e));
      }
    }
  }

  // AdamW over 64 Mi parameters: f32 masters and moments, 16-bit gradients and model copy; the
  // lowering counts 30 bytes per parameter for a mixed-precision optimizer step.
  void optimizer() {
    const int64_t p = int64_t{1} << 26;
    Tensor params = random_tensor(gpu_, s_, DType::f32, {p}, rng_, 0.02);
    Tensor grads = random_tensor(gpu_, s_, dt_, {p}, rng_, 0.01);
    Tensor m = gpu_.zeros(s_, DType::f32, {p}), v = gpu_.zeros(s_, DType::f32, {p});
    Tensor copy = gpu_.empty(dt_, {p}), scale = gpu_.empty(DType::f32, {1});
    gpu_.fill(s_, scale, 1.0);
    int64_t step = 0;
    const double seconds =
        time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.adamw_step(s_, params, grads, m, v, scale, AdamWConfig{}, ++step, copy); });
    const double bytes = 30.0 * static_cast<double>(p);
    point("", "adamw", "optimizer", fmt::format("P {}", p), 10.0 * static_cast<double>(p), bytes, seconds);
    if (hbm_ > 0) {
      json::Json e;
      e["op_kind"] = "optimizer";
      e["memory_efficiency"] = clamp_efficiency(bytes / (seconds * hbm_), "adamw");
      entries_.push_back(std::move(e));
    }
  }

  CalibrationResult finish(const CudaDeviceInfo& info) {
    json::Json table;
    table["schema_version"] = 1;
    table["gpu"] = result_.gpu;
    table["precision"] = result_.precision;
    table["source"] = fmt::format("trainplan executor microbenchmarks on {} (sm {}, CUDA runtime {}, driver {}); "
                                  "micro-batch {}, {} repeats after {} warm-up",
                                  info.name, info.compute_capability(), info.runtime_version, info.driver_version,
                                  micro_batch_, rep_, wu_);
    table["entries"] = std::move(entries_);
    result_.table = std::move(table);
    json::Json meas;
    meas["device"] = info.name;
    meas["compute_capability"] = info.compute_capability();
    meas["catalog_gpu"] = result_.gpu;
    meas["precision"] = result_.precision;
    meas["peak_flops_per_s"] = peak_;
    meas["memory_bandwidth_bytes_per_s"] = hbm_;
    meas["points"] = std::move(points_);
    meas["notes"] = result_.notes;
    result_.measurements = std::move(meas);
    return std::move(result_);
  }

 private:
  // The attention the backend runs for the model's shape (cuda_attention_kernel: tensor-core or
  // CUDA-core flash kernels, or unfused), for op_cost's FLOPs and bytes.
  plan::AttentionImpl attention_impl(const models::ModelSpec& spec) const {
    const AttentionShape sh{micro_batch_, spec.seq_len, spec.heads, spec.kv_heads > 0 ? spec.kv_heads : spec.heads,
                            spec.head_dim(), true};
    return cuda_attention_kernel(gpu_, sh, dt_) == "unfused" ? plan::AttentionImpl::unfused
                                                             : plan::AttentionImpl::flash;
  }

  double clamp_efficiency(double e, const std::string& what) {
    if (e > 1.0) {
      result_.notes.push_back(fmt::format("{}: measured efficiency {:.3f} above 1 (cache effects) written as 1", what, e));
      return 1.0;
    }
    return e;
  }

  void point(const std::string& model, const std::string& op, const std::string& kind, const std::string& shape,
             double flops, double bytes, double seconds) {
    json::Json p;
    p["model"] = model;
    p["op"] = op;
    p["op_kind"] = kind;
    p["shape"] = shape;
    p["flops"] = flops;
    p["bytes"] = bytes;
    p["duration_s"] = seconds;
    p["flops_per_s"] = seconds > 0 ? flops / seconds : 0.0;
    p["bytes_per_s"] = seconds > 0 ? bytes / seconds : 0.0;
    points_.push_back(std::move(p));
  }

  // A GEMM shape: the forward as a table entry (duration), forward and backward as points.
  void linear(const std::string& model_name, const models::Op& op, const plan::OpCost& cost) {
    const std::string kind(models::op_kind_name(op.kind));
    const std::string shape = fmt::format("m {} n {} k {}", cost.gemm_m, cost.gemm_n, cost.gemm_k);
    if (!seen_.insert(kind + shape).second) return;
    Tensor inp = random_tensor(gpu_, s_, dt_, {cost.gemm_m, cost.gemm_k}, rng_);
    Tensor w = random_tensor(gpu_, s_, dt_, {cost.gemm_n, cost.gemm_k}, rng_, 0.02);
    Tensor out = gpu_.empty(dt_, {cost.gemm_m, cost.gemm_n});
    const double seconds = time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.linear_forward(s_, out, inp, w, Tensor()); });
    json::Json e;
    e["op_kind"] = kind;
    e["m"] = cost.gemm_m;
    e["n"] = cost.gemm_n;
    e["k"] = cost.gemm_k;
    e["duration_s"] = seconds;
    entries_.push_back(std::move(e));
    const double mnk = static_cast<double>(cost.gemm_m * cost.gemm_n) * static_cast<double>(cost.gemm_k);
    point(model_name, op.name, kind, shape, 2.0 * mnk, cost.mem_fwd_bytes, seconds);
    // The two backward products, as points only.
    Tensor dinp = gpu_.empty(dt_, {cost.gemm_m, cost.gemm_k});
    Tensor dw = gpu_.zeros(s_, dt_, {cost.gemm_n, cost.gemm_k});
    const double bwd = time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.linear_backward(s_, dinp, dw, Tensor(), out, inp, w); });
    point(model_name, op.name + " backward", kind, shape, 4.0 * mnk, cost.mem_bwd_bytes, bwd);
  }

  // Forward and backward of the fused attention; the forward's efficiency as a table entry.
  double attention(const std::string& model_name, const models::Op& op, const plan::OpCost& cost, int64_t T,
                   std::string& shape) {
    const int64_t B = micro_batch_;
    const AttentionShape sh{B, T, op.heads, op.kv_heads > 0 ? op.kv_heads : op.heads, op.head_dim, op.causal};
    shape = fmt::format("B {} T {} H {} KVH {} D {}", B, T, sh.heads, sh.kv_heads, sh.head_dim);
    Tensor qkv = random_tensor(gpu_, s_, dt_, {sh.tokens(), sh.qkv_cols()}, rng_);
    Tensor out = gpu_.empty(dt_, {sh.tokens(), sh.out_cols()});
    Tensor lse = gpu_.empty(DType::f32, {B, sh.heads, T});
    const double seconds = time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.attention_forward(s_, out, lse, qkv, sh); });
    Tensor dqkv = gpu_.empty(dt_, {sh.tokens(), sh.qkv_cols()});
    const double bwd = time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.attention_backward(s_, dqkv, out, qkv, out, lse, sh); });
    point(model_name, op.name + " backward", "attention", shape, cost.flops_bwd, cost.mem_bwd_bytes, bwd);
    if (peak_ > 0) {
      json::Json e;
      e["op_kind"] = "attention";
      e["m"] = cost.gemm_m;
      e["n"] = cost.gemm_n;
      e["k"] = cost.gemm_k;
      e["compute_efficiency"] = clamp_efficiency(cost.flops_fwd / (seconds * peak_), model_name + " attention");
      entries_.push_back(std::move(e));
    }
    return seconds;
  }

  double norm(const models::Op& op, int64_t N, int64_t width) {
    Tensor inp = random_tensor(gpu_, s_, dt_, {N, width}, rng_);
    Tensor w = random_tensor(gpu_, s_, dt_, {width}, rng_);
    Tensor out = gpu_.empty(dt_, {N, width});
    Tensor mean = gpu_.empty(DType::f32, {N}), rstd = gpu_.empty(DType::f32, {N});
    if (op.kind == models::OpKind::layernorm)
      return time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.layernorm_forward(s_, out, mean, rstd, inp, w, w, 1e-5); });
    return time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.rmsnorm_forward(s_, out, rstd, inp, w, 1e-5); });
  }

  double activation(const models::Op& op, int64_t N, int64_t width) {
    const bool swiglu = op.activation == models::Activation::swiglu;
    Tensor inp = random_tensor(gpu_, s_, dt_, {N, swiglu ? 2 * width : width}, rng_);
    Tensor out = gpu_.empty(dt_, {N, width});
    return time_calls(gpu_, s_, wu_, rep_, [&] {
      if (swiglu)
        gpu_.swiglu_forward(s_, out, inp);
      else if (op.activation == models::Activation::relu)
        gpu_.relu_forward(s_, out, inp);
      else
        gpu_.gelu_forward(s_, out, inp);
    });
  }

  double residual(int64_t N, int64_t width) {
    Tensor a = random_tensor(gpu_, s_, dt_, {N, width}, rng_), b = random_tensor(gpu_, s_, dt_, {N, width}, rng_);
    Tensor out = gpu_.empty(dt_, {N, width});
    return time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.add(s_, out, a, b); });
  }

  double embedding(int64_t N, int64_t rows, int64_t width) {
    Tensor table = random_tensor(gpu_, s_, dt_, {rows, width}, rng_);
    Tensor ids = random_ids(gpu_, s_, N, rows, rng_);
    Tensor out = gpu_.empty(dt_, {N, width});
    return time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.embedding_forward(s_, out, ids, table, 0, false); });
  }

  double loss(int64_t N, int64_t vocab) {
    Tensor logits = random_tensor(gpu_, s_, dt_, {N, vocab}, rng_);
    Tensor targets = random_ids(gpu_, s_, N, vocab, rng_);
    Tensor losses = gpu_.empty(DType::f32, {N}), mx = gpu_.empty(DType::f32, {N}), se = gpu_.empty(DType::f32, {N});
    return time_calls(gpu_, s_, wu_, rep_, [&] { gpu_.cross_entropy_forward(s_, losses, mx, se, logits, targets); });
  }

  // Times one non-GEMM op (once per kind and shape): nullopt when skipped.
  std::optional<double> other_op(const std::string& model_name, const models::ModelSpec& spec, const models::ModelGraph& graph, const models::Op& op,
                                 const plan::OpCost& cost, std::string& shape) {
    const std::string kind(models::op_kind_name(op.kind));
    const int64_t N = micro_batch_ * spec.seq_len;
    const int64_t width = op.out_shape.empty() ? 0 : op.out_shape.back();
    switch (op.kind) {
      case models::OpKind::attention: {
        const AttentionShape sh{micro_batch_, spec.seq_len, op.heads, op.kv_heads > 0 ? op.kv_heads : op.heads, op.head_dim,
                                op.causal};
        const std::string key = fmt::format("B {} T {} H {} KVH {} D {}", micro_batch_, spec.seq_len, sh.heads,
                                            sh.kv_heads, sh.head_dim);
        if (!seen_.insert(kind + key).second) return std::nullopt;
        return attention(model_name, op, cost, spec.seq_len, shape);
      }
      case models::OpKind::layernorm:
      case models::OpKind::rmsnorm:
        shape = fmt::format("N {} C {}", N, width);
        if (!seen_.insert(kind + shape).second) return std::nullopt;
        return norm(op, N, width);
      case models::OpKind::activation: {
        const bool swiglu = op.activation == models::Activation::swiglu;
        shape = fmt::format("N {} F {}{}", N, width, swiglu ? " swiglu" : "");
        if (!seen_.insert(kind + shape).second) return std::nullopt;
        return activation(op, N, width);
      }
      case models::OpKind::residual:
        shape = fmt::format("N {} C {}", N, width);
        if (!seen_.insert(kind + shape).second) return std::nullopt;
        return residual(N, width);
      case models::OpKind::embedding: {
        const int64_t rows = op.weight_shape.empty() ? spec.vocab : op.weight_shape.front();
        shape = fmt::format("N {} rows {} C {}", N, rows, width);
        if (!seen_.insert(kind + shape).second) return std::nullopt;
        return embedding(N, rows, width);
      }
      case models::OpKind::loss: {
        const int64_t vocab = op.inputs.empty() ? spec.vocab : graph.ops()[static_cast<size_t>(op.inputs.front())].n;
        shape = fmt::format("N {} V {}", N, vocab);
        if (!seen_.insert(kind + shape).second) return std::nullopt;
        return loss(N, vocab);
      }
      default: return std::nullopt;  // dropout runs as identity; no other kinds in decoders
    }
  }

  Backend& gpu_;
  Stream& s_;
  Rng rng_;
  DType dt_;
  Precision precision_ = Precision::bf16;
  int wu_, rep_;
  int64_t micro_batch_;
  double peak_ = 0, hbm_ = 0;
  CalibrationResult result_;
  json::Json entries_ = json::Json::array();
  json::Json points_ = json::Json::array();
  std::set<std::string> seen_;
};

}  // namespace

CalibrationResult run_compute_calibration(Backend& gpu, const CalibrationOptions& options) {
  const int device = cuda_backend_device(gpu);
  if (device < 0) throw Error(fmt::format("calibration: backend \"{}\" is not a cuda backend", gpu.name()));
  if (options.repeats < 1 || options.warmup < 0 || options.micro_batch < 1)
    throw Error("calibration: repeats and micro_batch must be >= 1, warmup >= 0");
  const CudaDeviceInfo info = cuda_device_info(device);
  const DType dt = options.dtype.value_or(gpu.supports(DType::bf16) ? DType::bf16 : DType::f16);
  ComputeCalibration run(gpu, options, info, catalog_gpu_of(info), dt);
  for (const std::string& model_name : options.models) run.model(model_name, options.max_seq_len);
  run.optimizer();
  return run.finish(info);
}

json::Json run_nccl_benchmark(Communicator& comm, Backend& backend, const NcclBenchOptions& options,
                              const std::string& gpu_name) {
  if (options.min_bytes < 4 || options.max_bytes < options.min_bytes || options.iterations < 1)
    throw Error("nccl benchmark: needs 4 <= min_bytes <= max_bytes and iterations >= 1");
  const int n = comm.world_size();
  CommGroup world{1 << 20, {}, "world"};  // an id no plan group uses
  for (int r = 0; r < n; ++r) world.ranks.push_back(r);
  Stream& s = backend.default_stream();
  int64_t tag = 0;
  json::Json entries = json::Json::array();
  for (const std::string& coll : options.collectives) {
    const double factor = nccl_bus_factor(coll, n);
    for (int64_t size = options.min_bytes; size <= options.max_bytes; size *= 2) {
      // nccl-tests sizes: the whole buffer; all_gather / reduce_scatter split it in n chunks.
      const int64_t count = std::max<int64_t>(1, size / 4);
      const int64_t chunk = std::max<int64_t>(1, count / n);
      Tensor big = backend.zeros(s, DType::f32, {chunk * n});
      Tensor part = backend.zeros(s, DType::f32, {chunk});
      Tensor whole = backend.zeros(s, DType::f32, {count});
      auto issue = [&]() -> std::shared_ptr<CommRequest> {
        ++tag;
        if (coll == "all_reduce") return comm.start_all_reduce(world, tag, whole, ReduceOp::sum);
        if (coll == "all_gather") return comm.start_all_gather(world, tag, big, part);
        if (coll == "reduce_scatter") return comm.start_reduce_scatter(world, tag, part, big, ReduceOp::sum);
        if (coll == "reduce") return comm.start_reduce(world, tag, whole, ReduceOp::sum, 0);
        return comm.start_broadcast(world, tag, whole, 0);
      };
      const int iters = size > (int64_t{64} << 20) ? std::max(2, options.iterations / 4) : options.iterations;
      for (int i = 0; i < options.warmup; ++i) issue()->wait();
      comm.barrier(world, ++tag);
      const double t0 = Backend::now_s();
      std::vector<std::shared_ptr<CommRequest>> requests;
      for (int i = 0; i < iters; ++i) requests.push_back(issue());
      for (auto& r : requests) r->wait();
      const double seconds = (Backend::now_s() - t0) / iters;
      const double bytes = static_cast<double>(coll == "all_reduce" || coll == "broadcast" || coll == "reduce"
                                                   ? count * 4
                                                   : chunk * n * 4);
      json::Json e;
      e["collective"] = coll;
      e["size_bytes"] = bytes;
      e["duration_s"] = seconds;
      e["algbw_bytes_per_s"] = bytes / seconds;
      e["busbw_bytes_per_s"] = bytes / seconds * factor;
      entries.push_back(std::move(e));
    }
  }
  json::Json table;
  table["schema_version"] = 1;
  table["gpu"] = gpu_name;
  table["ranks"] = n;
  table["source"] = "trainplan executor NCCL benchmark (host-timed, back-to-back operations on one communicator)";
  table["entries"] = std::move(entries);
  return table;
}

}  // namespace trainplan::executor
