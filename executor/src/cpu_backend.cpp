// CPU reference backend (see cpu_backend.hpp).
#include "cpu_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "cpu_kernels.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor {
namespace {

constexpr size_t kAlignmentBytes = 64;

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(size_t size_bytes) : size_bytes_(size_bytes) {
    // aligned_alloc needs a size that is a multiple of the alignment (and non-zero).
    size_t rounded = std::max<size_t>(kAlignmentBytes, (size_bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes);
    data_ = std::aligned_alloc(kAlignmentBytes, rounded);
    if (!data_) throw Error(fmt::format("cpu backend: out of host memory allocating {} bytes", size_bytes));
  }
  ~CpuBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  size_t size_bytes() const override { return size_bytes_; }
  bool host_accessible() const override { return true; }
  std::string_view backend_name() const override { return "cpu"; }

 private:
  void* data_ = nullptr;
  size_t size_bytes_;
};

class CpuStream final : public Stream {};

class CpuEvent final : public Event {
 public:
  std::optional<double> time_s;  // steady clock when recorded
};

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  bool runs_when_queued() const override { return true; }
  std::string description() const override {
    return "CPU reference: float32/float64, single-threaded, deterministic; synchronous streams";
  }
  bool supports(DType dtype) const override { return dtype == DType::f32 || dtype == DType::f64; }

  Stream& default_stream() override { return default_stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  // Work runs when it is queued, so an event completes when it is recorded.
  void record(Event& event, Stream& stream) override {
    check_stream(stream);
    cpu_event(event).time_s = now_s();
  }
  void wait(Stream& stream, Event& event) override {
    check_stream(stream);
    recorded(event, "wait");
  }
  void synchronize(Stream& stream) override { check_stream(stream); }
  void synchronize(Event& event) override { recorded(event, "synchronize"); }
  double elapsed_s(Event& start, Event& end) override {
    return recorded(end, "elapsed_s") - recorded(start, "elapsed_s");
  }

 protected:
  std::unique_ptr<Buffer> allocate_impl(size_t size_bytes) override { return std::make_unique<CpuBuffer>(size_bytes); }
  void upload_impl(Stream& s, const Tensor& dst, const std::byte* host) override {
    check_stream(s);
    std::memcpy(dst.data(), host, dst.size_bytes());
  }
  void download_impl(Stream& s, std::byte* host, const Tensor& src) override {
    check_stream(s);
    std::memcpy(host, src.data(), src.size_bytes());
  }
  void copy_impl(Stream& s, const Tensor& dst, const Tensor& src) override {
    check_stream(s);
    std::memcpy(dst.data(), src.data(), dst.size_bytes());
  }

  // Each kernel: check the stream, find the one compute dtype of the call, run the template.
  void fill_impl(Stream& s, const Tensor& x, double value) override {
    run(s, "fill", {&x}, [&](auto t) { using T = decltype(t); cpu::fill<T>(ptr<T>(x), x.numel(), static_cast<T>(value)); });
  }
  void add_impl(Stream& s, const Tensor& out, const Tensor& a, const Tensor& b) override {
    run(s, "add", {&out, &a, &b}, [&](auto t) {
      using T = decltype(t);
      cpu::add<T>(ptr<T>(out), ptr<T>(a), ptr<T>(b), out.numel());
    });
  }
  void accumulate_impl(Stream& s, const Tensor& y, const Tensor& x) override {
    run(s, "accumulate", {&y, &x}, [&](auto t) { using T = decltype(t); cpu::accumulate<T>(ptr<T>(y), ptr<T>(x), y.numel()); });
  }
  void embedding_forward_impl(Stream& s, const Tensor& out, const Tensor& ids, const Tensor& table,
                              int64_t row_begin, bool accumulate) override {
    run(s, "embedding_forward", {&out, &table}, [&](auto t) {
      using T = decltype(t);
      cpu::embedding_forward<T>(ptr<T>(out), ptr<int32_t>(ids), ptr<T>(table), out.rows(), out.cols(), table.dim(0),
                                row_begin, accumulate);
    });
  }
  void embedding_backward_impl(Stream& s, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                               int64_t row_begin) override {
    run(s, "embedding_backward", {&dtable, &dout}, [&](auto t) {
      using T = decltype(t);
      cpu::embedding_backward<T>(ptr<T>(dtable), ptr<T>(dout), ptr<int32_t>(ids), dout.rows(), dout.cols(),
                                 dtable.dim(0), row_begin);
    });
  }
  void layernorm_forward_impl(Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                              const Tensor& weight, const Tensor& bias, double eps) override {
    run(s, "layernorm_forward", {&out, &mean, &rstd, &inp, &weight, &bias}, [&](auto t) {
      using T = decltype(t);
      cpu::layernorm_forward<T>(ptr<T>(out), ptr<T>(mean), ptr<T>(rstd), ptr<T>(inp), ptr<T>(weight), ptr<T>(bias),
                                inp.rows(), inp.cols(), eps);
    });
  }
  void layernorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd) override {
    run(s, "layernorm_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd}, [&](auto t) {
      using T = decltype(t);
      cpu::layernorm_backward<T>(ptr<T>(dinp), ptr<T>(dweight), ptr<T>(dbias), ptr<T>(dout), ptr<T>(inp),
                                 ptr<T>(weight), ptr<T>(mean), ptr<T>(rstd), inp.rows(), inp.cols());
    });
  }
  void rmsnorm_forward_impl(Stream& s, const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                            double eps) override {
    run(s, "rmsnorm_forward", {&out, &rstd, &inp, &weight}, [&](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_forward<T>(ptr<T>(out), ptr<T>(rstd), ptr<T>(inp), ptr<T>(weight), inp.rows(), inp.cols(), eps);
    });
  }
  void rmsnorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                             const Tensor& inp, const Tensor& weight, const Tensor& rstd) override {
    run(s, "rmsnorm_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd}, [&](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_backward<T>(ptr<T>(dinp), ptr<T>(dweight), ptr<T>(dout), ptr<T>(inp), ptr<T>(weight), ptr<T>(rstd),
                               inp.rows(), inp.cols());
    });
  }
  void linear_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) override {
    run(s, "linear_forward", {&out, &inp, &weight, &bias}, [&](auto t) {
      using T = decltype(t);
      cpu::linear_forward<T>(ptr<T>(out), ptr<T>(inp), ptr<T>(weight), ptr<T>(bias), inp.rows(), inp.cols(),
                             weight.dim(0));
    });
  }
  void linear_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                            const Tensor& dout, const Tensor& inp, const Tensor& weight) override {
    run(s, "linear_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight}, [&](auto t) {
      using T = decltype(t);
      cpu::linear_backward<T>(ptr<T>(dinp), ptr<T>(dweight), ptr<T>(dbias), ptr<T>(dout), ptr<T>(inp), ptr<T>(weight),
                              inp.rows(), inp.cols(), weight.dim(0));
    });
  }
  void gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) override {
    run(s, "gelu_forward", {&out, &inp}, [&](auto t) { using T = decltype(t); cpu::gelu_forward<T>(ptr<T>(out), ptr<T>(inp), inp.numel()); });
  }
  void gelu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    run(s, "gelu_backward", {&dinp, &inp, &dout}, [&](auto t) {
      using T = decltype(t);
      cpu::gelu_backward<T>(ptr<T>(dinp), ptr<T>(inp), ptr<T>(dout), inp.numel());
    });
  }
  void relu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) override {
    run(s, "relu_forward", {&out, &inp}, [&](auto t) { using T = decltype(t); cpu::relu_forward<T>(ptr<T>(out), ptr<T>(inp), inp.numel()); });
  }
  void relu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    run(s, "relu_backward", {&dinp, &inp, &dout}, [&](auto t) {
      using T = decltype(t);
      cpu::relu_backward<T>(ptr<T>(dinp), ptr<T>(inp), ptr<T>(dout), inp.numel());
    });
  }
  void swiglu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) override {
    run(s, "swiglu_forward", {&out, &inp}, [&](auto t) {
      using T = decltype(t);
      cpu::swiglu_forward<T>(ptr<T>(out), ptr<T>(inp), out.rows(), out.cols());
    });
  }
  void swiglu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    run(s, "swiglu_backward", {&dinp, &inp, &dout}, [&](auto t) {
      using T = decltype(t);
      cpu::swiglu_backward<T>(ptr<T>(dinp), ptr<T>(inp), ptr<T>(dout), dout.rows(), dout.cols());
    });
  }
  void router_forward_impl(Stream& s, const Tensor& weights, const Tensor& experts, const Tensor& probs,
                           const Tensor& logits) override {
    run(s, "router_forward", {&weights, &probs, &logits}, [&](auto t) {
      using T = decltype(t);
      cpu::router_forward<T>(ptr<T>(weights), ptr<int32_t>(experts), ptr<T>(probs), ptr<T>(logits), logits.rows(),
                             logits.cols(), weights.cols());
    });
  }
  void router_backward_impl(Stream& s, const Tensor& dlogits, const Tensor& dweights, const Tensor& weights,
                            const Tensor& experts, const Tensor& probs) override {
    run(s, "router_backward", {&dlogits, &dweights, &weights, &probs}, [&](auto t) {
      using T = decltype(t);
      cpu::router_backward<T>(ptr<T>(dlogits), ptr<T>(dweights), ptr<T>(weights), ptr<int32_t>(experts),
                              ptr<T>(probs), probs.rows(), probs.cols(), weights.cols());
    });
  }
  void moe_combine_forward_impl(Stream& s, const Tensor& out, const Tensor& y, const Tensor& weights,
                                const Tensor& rows) override {
    check_rows(rows, y.rows(), "moe_combine_forward");
    run(s, "moe_combine_forward", {&out, &y, &weights}, [&](auto t) {
      using T = decltype(t);
      cpu::moe_combine_forward<T>(ptr<T>(out), ptr<T>(y), ptr<T>(weights), ptr<int32_t>(rows), out.rows(),
                                  out.cols(), weights.cols());
    });
  }
  void moe_combine_backward_impl(Stream& s, const Tensor& dy, const Tensor& dweights, const Tensor& dout,
                                 const Tensor& y, const Tensor& weights, const Tensor& rows) override {
    check_rows(rows, y.rows(), "moe_combine_backward");
    run(s, "moe_combine_backward", {&dy, &dweights, &dout, &y, &weights}, [&](auto t) {
      using T = decltype(t);
      cpu::moe_combine_backward<T>(ptr<T>(dy), ptr<T>(dweights), ptr<T>(dout), ptr<T>(y), ptr<T>(weights),
                                   ptr<int32_t>(rows), dout.rows(), dout.cols(), weights.cols(), y.rows());
    });
  }
  // Every row index of a combine names a routed copy (or is negative: dropped), each at most once.
  static void check_rows(const Tensor& rows, int64_t copies, std::string_view kernel) {
    const int32_t* r = rows.data_as<int32_t>();
    std::vector<bool> seen(static_cast<size_t>(copies), false);
    for (int64_t i = 0; i < rows.numel(); ++i) {
      if (r[i] < 0) continue;
      if (r[i] >= copies || seen[static_cast<size_t>(r[i])])
        throw Error(fmt::format("{}: rows[{}] = {} is outside [0, {}) or repeated", kernel, i, r[i], copies))
            .hint("each token's routed copy is one row of y");
      seen[static_cast<size_t>(r[i])] = true;
    }
  }
  void attention_forward_impl(Stream& s, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                              const AttentionShape& sh) override {
    run(s, "attention_forward", {&out, &lse, &qkv}, [&](auto t) {
      using T = decltype(t);
      cpu::attention_forward<T>(ptr<T>(out), ptr<T>(lse), ptr<T>(qkv), sh.batch, sh.seq, sh.heads, sh.kv_heads,
                                sh.head_dim, sh.causal);
    });
  }
  void attention_backward_impl(Stream& s, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                               const Tensor& out, const Tensor& lse, const AttentionShape& sh) override {
    run(s, "attention_backward", {&dqkv, &dout, &qkv, &out, &lse}, [&](auto t) {
      using T = decltype(t);
      cpu::attention_backward<T>(ptr<T>(dqkv), ptr<T>(dout), ptr<T>(qkv), ptr<T>(out), ptr<T>(lse), sh.batch, sh.seq,
                                 sh.heads, sh.kv_heads, sh.head_dim, sh.causal);
    });
  }
  void rotary_impl(Stream& s, const Tensor& out, const Tensor& inp, const AttentionShape& sh, double theta,
                   bool inverse) override {
    run(s, "rotary", {&out, &inp}, [&](auto t) {
      using T = decltype(t);
      cpu::rotary<T>(ptr<T>(out), ptr<T>(inp), sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim, theta, inverse);
    });
  }
  void ce_local_max_impl(Stream& s, const Tensor& max, const Tensor& logits) override {
    run(s, "ce_local_max", {&max, &logits}, [&](auto t) {
      using T = decltype(t);
      cpu::ce_local_max<T>(ptr<T>(max), ptr<T>(logits), logits.rows(), logits.cols());
    });
  }
  void ce_local_sum_exp_impl(Stream& s, const Tensor& sum_exp, const Tensor& logits, const Tensor& max) override {
    run(s, "ce_local_sum_exp", {&sum_exp, &logits, &max}, [&](auto t) {
      using T = decltype(t);
      cpu::ce_local_sum_exp<T>(ptr<T>(sum_exp), ptr<T>(logits), ptr<T>(max), logits.rows(), logits.cols());
    });
  }
  void ce_local_target_logit_impl(Stream& s, const Tensor& target_logit, const Tensor& logits, const Tensor& targets,
                                  int64_t vocab_begin) override {
    run(s, "ce_local_target_logit", {&target_logit, &logits}, [&](auto t) {
      using T = decltype(t);
      cpu::ce_local_target_logit<T>(ptr<T>(target_logit), ptr<T>(logits), ptr<int32_t>(targets), logits.rows(),
                                    logits.cols(), vocab_begin);
    });
  }
  void ce_combine_impl(Stream& s, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                       const Tensor& target_logit) override {
    run(s, "ce_combine", {&losses, &max, &sum_exp, &target_logit}, [&](auto t) {
      using T = decltype(t);
      cpu::ce_combine<T>(ptr<T>(losses), ptr<T>(max), ptr<T>(sum_exp), ptr<T>(target_logit), losses.numel());
    });
  }
  void ce_backward_impl(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                        int64_t vocab_begin, const Tensor& max, const Tensor& sum_exp, double dloss_scale) override {
    run(s, "ce_backward", {&dlogits, &logits, &max, &sum_exp}, [&](auto t) {
      using T = decltype(t);
      cpu::ce_backward<T>(ptr<T>(dlogits), ptr<T>(logits), ptr<int32_t>(targets), ptr<T>(max), ptr<T>(sum_exp),
                          logits.rows(), logits.cols(), vocab_begin, dloss_scale);
    });
  }
  void sum_squares_impl(Stream& s, const Tensor& out, const Tensor& x) override {
    run(s, "sum_squares", {&out, &x}, [&](auto t) { using T = decltype(t); cpu::sum_squares<T>(ptr<T>(out), ptr<T>(x), x.numel()); });
  }
  void clip_scale_impl(Stream& s, const Tensor& scale, const Tensor& sum_squares, double max_norm) override {
    run(s, "clip_scale", {&scale, &sum_squares}, [&](auto t) {
      using T = decltype(t);
      cpu::clip_scale<T>(ptr<T>(scale), ptr<T>(sum_squares), max_norm);
    });
  }
  void adamw_step_impl(Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                       const Tensor& scale, const AdamWConfig& c, int64_t step, const Tensor& model_copy) override {
    run(s, "adamw_step", {&params, &grads, &m, &v, &scale}, [&](auto t) {
      using T = decltype(t);
      cpu::adamw_step<T>(ptr<T>(params), ptr<T>(grads), ptr<T>(m), ptr<T>(v), ptr<T>(scale), params.numel(),
                         c.learning_rate, c.beta1, c.beta2, c.eps, c.weight_decay, step);
      if (!model_copy.defined()) return;
      // The copy may be the other CPU dtype (e.g. f32 weights of f64 masters).
      const T* src = ptr<T>(params);
      if (model_copy.dtype() == DType::f32)
        for (int64_t i = 0; i < params.numel(); ++i) model_copy.data_as<float>()[i] = static_cast<float>(src[i]);
      else
        for (int64_t i = 0; i < params.numel(); ++i) model_copy.data_as<double>()[i] = static_cast<double>(src[i]);
    });
  }

 private:
  void check_stream(Stream& stream) const {
    if (dynamic_cast<CpuStream*>(&stream) == nullptr)
      throw Error("cpu backend: the stream was not created by a cpu backend");
  }
  CpuEvent& cpu_event(Event& event) const {
    auto* e = dynamic_cast<CpuEvent*>(&event);
    if (!e) throw Error("cpu backend: the event was not created by a cpu backend");
    return *e;
  }
  double recorded(Event& event, std::string_view what) const {
    CpuEvent& e = cpu_event(event);
    if (!e.time_s) throw Error(fmt::format("cpu backend: {}: the event was never recorded", what));
    return *e.time_s;
  }

  // Runs fn(T{}) with T the single floating dtype shared by the defined tensors of the call
  // (the CPU backend does not mix f32 and f64 in one kernel).
  template <class Fn>
  void run(Stream& stream, std::string_view kernel, std::initializer_list<const Tensor*> floats, Fn&& fn) {
    check_stream(stream);
    std::optional<DType> dtype;
    const Tensor* first = nullptr;
    for (const Tensor* t : floats) {
      if (!t->defined()) continue;
      if (!dtype) {
        dtype = t->dtype();
        first = t;
      } else if (t->dtype() != *dtype) {
        throw Error(fmt::format("{}: the cpu backend computes each kernel in one dtype, got {} and {}", kernel,
                                first->describe(), t->describe()))
            .hint("convert the tensors to one of f32 or f64");
      }
    }
    TP_ASSERT(dtype.has_value());
    if (*dtype == DType::f32)
      fn(float{});
    else if (*dtype == DType::f64)
      fn(double{});
    else
      TP_ASSERT_MSG(false, "unsupported dtype passed the supports() check");
  }

  CpuStream default_stream_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace trainplan::executor
