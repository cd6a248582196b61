// The CUDA backend class (private): device memory through the stream-ordered allocator,
// CUDA streams with per-stream scratch (so kernels on different streams never share a
// workspace), CUDA events, cuBLASLt / cuBLAS handles, and the *_impl kernels of Backend.
// The NCCL communicator and the benchmarks reach the native handles through the helpers at
// the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/cuda_backend.hpp"

namespace trainplan::executor::cuda {

/// Makes `device` current for the lifetime of the guard, restoring the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

/// Scratch slots of a stream; each grows on demand and is reused by later calls.
enum class Scratch {
  partials_a,      // float block partials (norm weights, bias gradients)
  partials_b,      // float block partials (norm biases)
  partials_sum,    // double block partials (sum of squares)
  attention_dvec,  // float B*H*T
  attention_s,     // unfused: scores, fp32
  attention_dp,    // unfused: probability gradients, fp32
  attention_p,     // unfused: probabilities, element type of qkv
  attention_ds,    // unfused: score gradients, element type of qkv
  gemm,            // cuBLASLt / cuBLAS workspace
  embedding,       // the embedding gradient's sort keys, token order and radix-sort workspace
  count
};

/// What a backend's buffers and streams share, alive as long as any of them: the device, the
/// backend's default stream (frees are ordered on it) and the streams created since.
struct DeviceContext {
  int device = 0;
  cudaStream_t alloc_stream = nullptr;
  cudaEvent_t order_event = nullptr;  // ordering marker for order_after_all_streams
  std::mutex mutex;
  std::vector<cudaStream_t> streams;  // created streams, not alloc_stream
  size_t scratch_bytes = 0;           // device scratch held by all streams
  uint64_t allocations = 0;           // allocations so far (see order_after_allocations)
  explicit DeviceContext(int device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  /// Makes alloc_stream wait for the work queued so far on every created stream, so memory
  /// released on alloc_stream is not reused under a kernel of another stream.
  void order_after_all_streams();
  /// Makes `stream` wait for alloc_stream's work so far when an allocation happened since the
  /// last call for the same `seen` counter: memory the pool reuses on alloc_stream is then
  /// free before another stream touches it.
  void order_after_allocations(cudaStream_t stream, uint64_t& seen);
};

class CudaStream final : public Stream {
 public:
  /// Wraps the context's alloc stream (owned = false) or creates a new non-blocking stream.
  CudaStream(std::shared_ptr<DeviceContext> context, bool create);
  ~CudaStream() override;
  cudaStream_t handle() const { return stream_; }
  int device() const { return context_->device; }
  /// Device scratch of at least `bytes` for this stream (contents undefined). Growing frees
  /// the old block stream-ordered, so earlier kernels of this stream keep their memory.
  /// nullptr when the device is out of memory (the backend turns it into its OOM error).
  void* scratch(Scratch slot, size_t bytes);
  /// Pinned host scratch of at least `bytes` (synchronize the stream before reusing it).
  void* pinned(size_t bytes);
  size_t scratch_bytes() const;
  /// Orders this stream after the allocations made since its last launch (no-op for the
  /// alloc stream itself); called before every operation queued on it.
  void prepare();

 private:
  std::shared_ptr<DeviceContext> context_;
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
  uint64_t seen_allocations_ = 0;
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Block blocks_[static_cast<int>(Scratch::count)];
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device);
  ~CudaEvent() override;
  cudaEvent_t handle() const { return event_; }
  bool recorded = false;

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  std::string description() const override;
  bool supports(DType dtype) const override;

  Stream& default_stream() override { return *default_stream_; }
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  void record(Event& event, Stream& stream) override;
  void wait(Stream& stream, Event& event) override;
  void synchronize(Stream& stream) override;
  void synchronize(Event& event) override;
  double elapsed_s(Event& start, Event& end) override;

  int device() const { return device_; }
  const CudaDeviceInfo& info() const { return info_; }
  const CudaBackendOptions& options() const { return options_; }
  size_t workspace_bytes() const;
  void set_memory_note(std::string note) { memory_note_ = std::move(note); }
  /// Throws the out-of-memory Error for a failed request of `bytes`.
  [[noreturn]] void throw_out_of_memory(size_t bytes, const std::string& what) const;
  /// The CUDA stream of a Stream of this backend (Error for another backend's stream).
  CudaStream& stream_of(Stream& stream) const;
  /// stream.scratch, with the out-of-memory error.
  void* scratch(CudaStream& stream, Scratch slot, size_t bytes);
  const std::shared_ptr<DeviceContext>& context() const { return context_; }

 protected:
  std::unique_ptr<Buffer> allocate_impl(size_t size_bytes) override;
  void upload_impl(Stream& stream, const Tensor& dst, const std::byte* host) override;
  void download_impl(Stream& stream, std::byte* host, const Tensor& src) override;
  void copy_impl(Stream& stream, const Tensor& dst, const Tensor& src) override;

  void fill_impl(Stream& s, const Tensor& x, double value) override;
  void add_impl(Stream& s, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void accumulate_impl(Stream& s, const Tensor& y, const Tensor& x) override;
  void embedding_forward_impl(Stream& s, const Tensor& out, const Tensor& ids, const Tensor& table, int64_t row_begin,
                              bool accumulate) override;
  void embedding_backward_impl(Stream& s, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                               int64_t row_begin) override;
  void layernorm_forward_impl(Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                              const Tensor& weight, const Tensor& bias, double eps) override;
  void layernorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd) override;
  void rmsnorm_forward_impl(Stream& s, const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                            double eps) override;
  void rmsnorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                             const Tensor& inp, const Tensor& weight, const Tensor& rstd) override;
  void linear_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) override;
  void linear_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                            const Tensor& dout, const Tensor& inp, const Tensor& weight) override;
  void linear_residual_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                    const Tensor& bias, const Tensor& residual) override;
  void linear_gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& pre, const Tensor& inp,
                                const Tensor& weight, const Tensor& bias) override;
  void linear_backward_gelu_impl(Stream& s, const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                 const Tensor& dout, const Tensor& act, const Tensor& weight,
                                 const Tensor& pre) override;
  void gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) override;
  void gelu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  void relu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) override;
  void relu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  void swiglu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) override;
  void swiglu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  void attention_forward_impl(Stream& s, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                              const AttentionShape& shape) override;
  void attention_backward_impl(Stream& s, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                               const Tensor& out, const Tensor& lse, const AttentionShape& shape) override;
  void rotary_impl(Stream& s, const Tensor& out, const Tensor& inp, const AttentionShape& shape, double theta,
                   bool inverse) override;
  void ce_local_max_impl(Stream& s, const Tensor& max, const Tensor& logits) override;
  void ce_local_sum_exp_impl(Stream& s, const Tensor& sum_exp, const Tensor& logits, const Tensor& max) override;
  void ce_local_target_logit_impl(Stream& s, const Tensor& target_logit, const Tensor& logits, const Tensor& targets,
                                  int64_t vocab_begin) override;
  void ce_combine_impl(Stream& s, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                       const Tensor& target_logit) override;
  void ce_backward_impl(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                        int64_t vocab_begin, const Tensor& max, const Tensor& sum_exp, double dloss_scale) override;
  void sum_squares_impl(Stream& s, const Tensor& out, const Tensor& x) override;
  void clip_scale_impl(Stream& s, const Tensor& scale, const Tensor& sum_squares, double max_norm) override;
  void adamw_step_impl(Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                       const Tensor& scale, const AdamWConfig& config, int64_t step,
                       const Tensor& model_copy) override;

 public:
  // Which attention kernel runs (cuda_gemm.cpp): CudaAttention::fused / unfused as asked;
  // automatic and tensor_core take the tensor-core kernel when it covers the call (its tensors
  // 16-byte aligned), else (said once on stderr per reason) automatic's workspace rule or the
  // fused kernel.
  enum class AttentionPath { tensor_core, fused, unfused };
  AttentionPath attention_path(const AttentionShape& shape, Dt dtype, std::initializer_list<const Tensor*> tensors) const;
  /// Why the tensor-core attention does not cover (shape, dtype) on this GPU; "" when it does.
  std::string tensor_core_attention_gap(const AttentionShape& shape, Dt dtype) const;

 private:
  // Matrix products (cuda_gemm.cpp).
  struct GemmCall;
  void lt_matmul(CudaStream& stream, const GemmCall& call);
  GemmCall linear_call(const Tensor& out, const Tensor& inp, const Tensor& weight, std::string_view kernel) const;
  GemmCall dinp_call(const Tensor& dinp, const Tensor& dout, const Tensor& weight, std::string_view kernel) const;
  void batched_gemm(CudaStream& stream, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const void* a, Dt ab_type, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                    int64_t stride_b, float beta, void* c, Dt c_type, int64_t ldc, int64_t stride_c, int64_t batch);
  size_t unfused_bytes_per_head(int64_t seq, Dt dtype, bool backward) const;
  void attention_forward_unfused(CudaStream& stream, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                 const AttentionShape& shape);
  void attention_backward_unfused(CudaStream& stream, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, const AttentionShape& shape);
  void check_fused_attention(const AttentionShape& shape, std::string_view kernel) const;

  int device_;
  CudaBackendOptions options_;
  CudaDeviceInfo info_;
  std::shared_ptr<DeviceContext> context_;
  std::unique_ptr<CudaStream> default_stream_;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  struct AlgoCache;
  std::shared_ptr<AlgoCache> algo_cache_;  // created by the first matrix product
  std::string memory_note_;
};

/// The device element type of a tensor (Error for f64 / i32, naming the kernel and argument).
Dt device_dtype(const Tensor& t, std::string_view kernel, std::string_view arg);
/// DevPtr / CDevPtr of a tensor (nullptr for an undefined one).
DevPtr dev(const Tensor& t, std::string_view kernel, std::string_view arg);
CDevPtr cdev(const Tensor& t, std::string_view kernel, std::string_view arg);

/// The CUDA backend behind a Backend reference; nullptr for other backends.
CudaBackend* as_cuda(Backend& backend);
const CudaBackend* as_cuda(const Backend& backend);

}  // namespace trainplan::executor::cuda
