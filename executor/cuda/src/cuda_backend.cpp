// The CUDA backend (backend_impl.hpp): memory, streams, events, copies and the kernels that
// are not matrix products (those are in cuda_gemm.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "backend_impl.hpp"
#include "check.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/executor/cuda_benchmarks.hpp"

namespace trainplan::executor {
namespace cuda {
namespace {

// Device switch for destructors: never throws, errors are ignored (nothing can be done then).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) changed_ = cudaSetDevice(device) == cudaSuccess;
  }
  ~QuietDeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(std::shared_ptr<DeviceContext> context, void* ptr, size_t bytes)
      : context_(std::move(context)), ptr_(ptr), bytes_(bytes) {}
  ~CudaBuffer() override {
    if (!ptr_) return;
    QuietDeviceGuard guard(context_->device);
    context_->order_after_all_streams();
    (void)cudaFreeAsync(ptr_, context_->alloc_stream);
  }
  void* data() const override { return ptr_; }
  size_t size_bytes() const override { return bytes_; }
  bool host_accessible() const override { return false; }
  std::string_view backend_name() const override { return "cuda"; }

 private:
  std::shared_ptr<DeviceContext> context_;
  void* ptr_;
  size_t bytes_;
};

}  // namespace

// ---- device guard, context, streams, events ---------------------------------------------------

DeviceGuard::DeviceGuard(int device) {
  TP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    TP_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}
DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

DeviceContext::DeviceContext(int d) : device(d) {
  DeviceGuard guard(d);
  TP_CUDA_CHECK(cudaStreamCreateWithFlags(&alloc_stream, cudaStreamNonBlocking));
  TP_CUDA_CHECK(cudaEventCreateWithFlags(&order_event, cudaEventDisableTiming));
}

DeviceContext::~DeviceContext() {
  QuietDeviceGuard guard(device);
  if (order_event) (void)cudaEventDestroy(order_event);
  if (alloc_stream) (void)cudaStreamDestroy(alloc_stream);
}

void DeviceContext::order_after_all_streams() {
  std::lock_guard lock(mutex);
  for (cudaStream_t s : streams) {
    (void)cudaEventRecord(order_event, s);
    (void)cudaStreamWaitEvent(alloc_stream, order_event, 0);
  }
}

void DeviceContext::order_after_allocations(cudaStream_t stream, uint64_t& seen) {
  if (stream == alloc_stream) return;
  std::lock_guard lock(mutex);
  if (seen == allocations) return;
  TP_CUDA_CHECK(cudaEventRecord(order_event, alloc_stream));
  TP_CUDA_CHECK(cudaStreamWaitEvent(stream, order_event, 0));
  seen = allocations;
}

CudaStream::CudaStream(std::shared_ptr<DeviceContext> context, bool create)
    : context_(std::move(context)), owned_(create) {
  if (!create) {
    stream_ = context_->alloc_stream;
    return;
  }
  DeviceGuard guard(context_->device);
  TP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  std::lock_guard lock(context_->mutex);
  context_->streams.push_back(stream_);
}

CudaStream::~CudaStream() {
  QuietDeviceGuard guard(context_->device);
  size_t freed = 0;
  for (Block& b : blocks_)
    if (b.ptr) {
      (void)cudaFreeAsync(b.ptr, stream_);
      freed += b.bytes;
    }
  if (pinned_) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaFreeHost(pinned_);
  }
  std::lock_guard lock(context_->mutex);
  context_->scratch_bytes -= freed;
  if (owned_) {
    auto& v = context_->streams;
    v.erase(std::remove(v.begin(), v.end(), stream_), v.end());
    (void)cudaStreamDestroy(stream_);
  }
}

void CudaStream::prepare() { context_->order_after_allocations(stream_, seen_allocations_); }

void* CudaStream::scratch(Scratch slot, size_t bytes) {
  Block& b = blocks_[static_cast<int>(slot)];
  if (b.bytes >= bytes && b.ptr) return b.ptr;
  DeviceGuard guard(context_->device);
  const size_t old = b.bytes;
  if (b.ptr) TP_CUDA_CHECK(cudaFreeAsync(b.ptr, stream_));
  b.ptr = nullptr;
  b.bytes = 0;
  // Grow by at least a quarter, so slowly growing requests do not reallocate every call.
  const size_t want = std::max({bytes, old + old / 4, size_t{256}});
  const cudaError_t status = cudaMallocAsync(&b.ptr, want, stream_);
  {
    std::lock_guard lock(context_->mutex);
    context_->scratch_bytes -= old;
    if (status == cudaSuccess) {
      context_->scratch_bytes += want;
      ++context_->allocations;
    }
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    b.ptr = nullptr;
    return nullptr;
  }
  TP_CUDA_CHECK(status);
  b.bytes = want;
  return b.ptr;
}

void* CudaStream::pinned(size_t bytes) {
  if (pinned_bytes_ >= bytes && pinned_) return pinned_;
  DeviceGuard guard(context_->device);
  if (pinned_) {
    TP_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a queued copy may still read it
    TP_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    pinned_bytes_ = 0;
  }
  const size_t want = std::max<size_t>(bytes, 4096);
  TP_CUDA_CHECK(cudaMallocHost(&pinned_, want));
  pinned_bytes_ = want;
  return pinned_;
}

size_t CudaStream::scratch_bytes() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.bytes;
  return total;
}

CudaEvent::CudaEvent(int device) : device_(device) {
  DeviceGuard guard(device);
  TP_CUDA_CHECK(cudaEventCreate(&event_));
}
CudaEvent::~CudaEvent() {
  QuietDeviceGuard guard(device_);
  if (event_) (void)cudaEventDestroy(event_);
}

// ---- tensors as kernel arguments --------------------------------------------------------------

Dt device_dtype(const Tensor& t, std::string_view kernel, std::string_view arg) {
  switch (t.dtype()) {
    case DType::f32: return Dt::f32;
    case DType::bf16: return Dt::bf16;
    case DType::f16: return Dt::f16;
    default: break;
  }
  throw Error(fmt::format("{}: {} is {}; the cuda backend computes in f32, bf16 and f16", kernel, arg, t.describe()));
}

DevPtr dev(const Tensor& t, std::string_view kernel, std::string_view arg) {
  if (!t.defined()) return {};
  return DevPtr{t.data(), device_dtype(t, kernel, arg)};
}
CDevPtr cdev(const Tensor& t, std::string_view kernel, std::string_view arg) {
  if (!t.defined()) return {};
  return CDevPtr{t.data(), device_dtype(t, kernel, arg)};
}

CudaBackend* as_cuda(Backend& backend) { return dynamic_cast<CudaBackend*>(&backend); }
const CudaBackend* as_cuda(const Backend& backend) { return dynamic_cast<const CudaBackend*>(&backend); }

// ---- the backend ------------------------------------------------------------------------------

CudaBackend::CudaBackend(const CudaBackendOptions& options) : options_(options) {
  int device = options.device;
  if (device < 0) TP_CUDA_CHECK(cudaGetDevice(&device));
  const int count = cuda_device_count();
  if (device >= count)
    throw Error(fmt::format("cuda backend: device {} does not exist ({} visible)", device, count))
        .hint("CUDA_VISIBLE_DEVICES and nvidia-smi show the GPUs of this machine");
  device_ = device;
  info_ = cuda_device_info(device);
  if (options_.gemm_workspace_bytes == 0) {
    double bytes = 0;
    if (const hw::GpuSpec* gpu = catalog_gpu_of(info_))
      bytes = gpu->cublas_workspace_bytes;
    else
      for (const auto& [name, gpu] : hw::Catalog::builtin().gpus()) bytes = std::max(bytes, gpu.cublas_workspace_bytes);
    options_.gemm_workspace_bytes = static_cast<size_t>(bytes);
  }
  DeviceGuard guard(device_);
  // Keep freed memory in the stream-ordered pool (like a caching allocator) instead of
  // returning it to the driver at every synchronization.
  cudaMemPool_t pool = nullptr;
  TP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  TP_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  context_ = std::make_shared<DeviceContext>(device_);
  default_stream_ = std::make_unique<CudaStream>(context_, false);
  TP_CUBLAS_CHECK(cublasLtCreate(&lt_));
  TP_CUBLAS_CHECK(cublasCreate(&cublas_));
}

CudaBackend::~CudaBackend() {
  QuietDeviceGuard guard(device_);
  if (context_) (void)cudaStreamSynchronize(context_->alloc_stream);
  algo_cache_.reset();
  if (cublas_) (void)cublasDestroy(cublas_);
  if (lt_) (void)cublasLtDestroy(lt_);
}

std::string CudaBackend::description() const {
  return fmt::format("CUDA GPU {}: {} (sm_{}{}, {}, {} SMs); stores f32{} and f16, computes in fp32; cuBLASLt matrix "
                     "products, {} attention",
                     device_, info_.name, info_.compute_major, info_.compute_minor, gib(info_.memory_bytes),
                     info_.sm_count, info_.bf16 ? ", bf16" : "", cuda_attention_name(options_.attention));
}

bool CudaBackend::supports(DType dtype) const {
  return dtype == DType::f32 || dtype == DType::f16 || (dtype == DType::bf16 && info_.bf16);
}

size_t CudaBackend::workspace_bytes() const {
  std::lock_guard lock(context_->mutex);
  return context_->scratch_bytes;
}

void CudaBackend::throw_out_of_memory(size_t bytes, const std::string& what) const {
  size_t free_bytes = 0, total_bytes = 0;
  {
    DeviceGuard guard(device_);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
  }
  Error e(fmt::format("cuda backend: out of device memory allocating {} ({} bytes) for {} on GPU {} ({}): this "
                      "backend holds {} of tensors (peak {}) and {} of workspaces; the device has {} free of {}",
                      gib(static_cast<double>(bytes)), bytes, what, device_, info_.name,
                      gib(static_cast<double>(allocated_bytes())), gib(static_cast<double>(peak_allocated_bytes())),
                      gib(static_cast<double>(workspace_bytes())), gib(static_cast<double>(free_bytes)),
                      gib(static_cast<double>(total_bytes))));
  e.hint(memory_note_.empty()
             ? std::string("use a smaller micro-batch, activation recomputation, ZeRO or more GPUs")
             : memory_note_);
  throw e;
}

CudaStream& CudaBackend::stream_of(Stream& stream) const {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  if (!s) throw Error("cuda backend: the stream was not created by a cuda backend");
  if (s->device() != device_)
    throw Error(fmt::format("cuda backend: the stream belongs to GPU {}, this backend runs on GPU {}", s->device(),
                            device_));
  s->prepare();
  return *s;
}

void* CudaBackend::scratch(CudaStream& stream, Scratch slot, size_t bytes) {
  void* p = stream.scratch(slot, bytes);
  if (!p) throw_out_of_memory(bytes, "kernel workspace");
  return p;
}

std::unique_ptr<Stream> CudaBackend::create_stream() { return std::make_unique<CudaStream>(context_, true); }
std::unique_ptr<Event> CudaBackend::create_event() { return std::make_unique<CudaEvent>(device_); }

namespace {
CudaEvent& cuda_event(Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (!e) throw Error("cuda backend: the event was not created by a cuda backend");
  return *e;
}
CudaEvent& recorded(Event& event, std::string_view what) {
  CudaEvent& e = cuda_event(event);
  if (!e.recorded) throw Error(fmt::format("cuda backend: {}: the event was never recorded", what));
  return e;
}
}  // namespace

void CudaBackend::record(Event& event, Stream& stream) {
  DeviceGuard guard(device_);
  CudaStream& s = stream_of(stream);
  CudaEvent& e = cuda_event(event);
  TP_CUDA_CHECK(cudaEventRecord(e.handle(), s.handle()));
  e.recorded = true;
}

void CudaBackend::wait(Stream& stream, Event& event) {
  DeviceGuard guard(device_);
  CudaStream& s = stream_of(stream);
  CudaEvent& e = recorded(event, "wait");
  TP_CUDA_CHECK(cudaStreamWaitEvent(s.handle(), e.handle(), 0));
}

void CudaBackend::synchronize(Stream& stream) {
  DeviceGuard guard(device_);
  CudaStream& s = stream_of(stream);
  TP_CUDA_CHECK(cudaStreamSynchronize(s.handle()));
}

void CudaBackend::synchronize(Event& event) {
  CudaEvent& e = recorded(event, "synchronize");
  DeviceGuard guard(device_);
  TP_CUDA_CHECK(cudaEventSynchronize(e.handle()));
}

double CudaBackend::elapsed_s(Event& start, Event& end) {
  CudaEvent& a = recorded(start, "elapsed_s");
  CudaEvent& b = recorded(end, "elapsed_s");
  DeviceGuard guard(device_);
  TP_CUDA_CHECK(cudaEventSynchronize(b.handle()));
  float ms = 0;
  TP_CUDA_CHECK(cudaEventElapsedTime(&ms, a.handle(), b.handle()));
  return static_cast<double>(ms) * 1e-3;
}

// ---- memory and copies ------------------------------------------------------------------------

std::unique_ptr<Buffer> CudaBackend::allocate_impl(size_t size_bytes) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  if (size_bytes > 0) {
    const cudaError_t status = cudaMallocAsync(&ptr, size_bytes, context_->alloc_stream);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw_out_of_memory(size_bytes, "a tensor");
    }
    TP_CUDA_CHECK(status);
    std::lock_guard lock(context_->mutex);
    ++context_->allocations;
  }
  return std::make_unique<CudaBuffer>(context_, ptr, size_bytes);
}

void CudaBackend::upload_impl(Stream& stream, const Tensor& dst, const std::byte* host) {
  DeviceGuard guard(device_);
  CudaStream& s = stream_of(stream);
  TP_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host, dst.size_bytes(), cudaMemcpyHostToDevice, s.handle()));
}

void CudaBackend::download_impl(Stream& stream, std::byte* host, const Tensor& src) {
  DeviceGuard guard(device_);
  CudaStream& s = stream_of(stream);
  TP_CUDA_CHECK(cudaMemcpyAsync(host, src.data(), src.size_bytes(), cudaMemcpyDeviceToHost, s.handle()));
}

void CudaBackend::copy_impl(Stream& stream, const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(device_);
  CudaStream& s = stream_of(stream);
  TP_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.size_bytes(), cudaMemcpyDeviceToDevice, s.handle()));
}

// ---- kernels ----------------------------------------------------------------------------------

// The stream, the device made current, and the tensors as kernel arguments named for errors.
struct Call {
  Call(CudaBackend& be, Stream& s, std::string_view k) : guard(be.device()), stream(be.stream_of(s)), kernel(k) {}
  DeviceGuard guard;
  CudaStream& stream;
  std::string_view kernel;
  cudaStream_t h() const { return stream.handle(); }
  DevPtr out(const Tensor& t, std::string_view arg) const { return dev(t, kernel, arg); }
  CDevPtr in(const Tensor& t, std::string_view arg) const { return cdev(t, kernel, arg); }
  const int32_t* ids(const Tensor& t) const { return static_cast<const int32_t*>(t.data()); }
};

void CudaBackend::fill_impl(Stream& s, const Tensor& x, double value) {
  Call c(*this, s, "fill");
  cuda::fill(c.out(x, "x"), x.numel(), static_cast<float>(value), c.h());
}
void CudaBackend::add_impl(Stream& s, const Tensor& out, const Tensor& a, const Tensor& b) {
  Call c(*this, s, "add");
  cuda::add(c.out(out, "out"), c.in(a, "a"), c.in(b, "b"), out.numel(), c.h());
}
void CudaBackend::accumulate_impl(Stream& s, const Tensor& y, const Tensor& x) {
  Call c(*this, s, "accumulate");
  cuda::accumulate(c.out(y, "y"), c.in(x, "x"), y.numel(), c.h());
}

void CudaBackend::embedding_forward_impl(Stream& s, const Tensor& out, const Tensor& ids, const Tensor& table,
                                         int64_t row_begin, bool accumulate) {
  Call c(*this, s, "embedding_forward");
  cuda::embedding_forward(c.out(out, "out"), c.ids(ids), c.in(table, "table"), out.rows(), out.cols(), table.dim(0),
                          row_begin, accumulate, c.h());
}

void CudaBackend::embedding_backward_impl(Stream& s, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                                          int64_t row_begin) {
  // Deterministic scatter-add without a host round trip: the token rows are sorted by table row
  // on the device (stable), and each run of one row sums its tokens in order.
  Call c(*this, s, "embedding_backward");
  const int64_t n = ids.numel(), rows = dtable.dim(0);
  if (n > std::numeric_limits<int32_t>::max() / 4)
    throw Error(fmt::format("embedding_backward: {} ids are more than the cuda kernel indexes", n));
  if (rows >= std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("embedding_backward: a table of {} rows is more than the cuda kernel indexes", rows));
  const size_t bytes = cuda::embedding_backward_scratch_bytes(n);
  void* work = scratch(c.stream, Scratch::embedding, bytes);
  cuda::embedding_backward(c.out(dtable, "dtable"), c.in(dout, "dout"), static_cast<const int32_t*>(ids.data()), n,
                           rows, row_begin, dout.cols(), work, bytes, c.h());
}

void CudaBackend::layernorm_forward_impl(Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                         const Tensor& inp, const Tensor& weight, const Tensor& bias, double eps) {
  Call c(*this, s, "layernorm_forward");
  cuda::layernorm_forward(c.out(out, "out"), c.out(mean, "mean"), c.out(rstd, "rstd"), c.in(inp, "inp"),
                          c.in(weight, "weight"), c.in(bias, "bias"), inp.rows(), inp.cols(), static_cast<float>(eps),
                          c.h());
}

void CudaBackend::layernorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                          const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                          const Tensor& mean, const Tensor& rstd) {
  Call c(*this, s, "layernorm_backward");
  const int64_t n = inp.rows(), cols = inp.cols();
  const int blocks = partial_blocks(n);
  const size_t bytes = static_cast<size_t>(blocks) * static_cast<size_t>(cols) * sizeof(float);
  auto* pdw = static_cast<float*>(scratch(c.stream, Scratch::partials_a, bytes));
  auto* pdb = dbias.defined() ? static_cast<float*>(scratch(c.stream, Scratch::partials_b, bytes)) : nullptr;
  cuda::layernorm_backward(c.out(dinp, "dinp"), pdw, pdb, c.in(dout, "dout"), c.in(inp, "inp"), c.in(weight, "weight"),
                           c.in(mean, "mean"), c.in(rstd, "rstd"), n, cols, c.h());
  cuda::add_partials(c.out(dweight, "dweight"), pdw, blocks, cols, c.h());
  if (pdb) cuda::add_partials(c.out(dbias, "dbias"), pdb, blocks, cols, c.h());
}

void CudaBackend::rmsnorm_forward_impl(Stream& s, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                                       const Tensor& weight, double eps) {
  Call c(*this, s, "rmsnorm_forward");
  cuda::rmsnorm_forward(c.out(out, "out"), c.out(rstd, "rstd"), c.in(inp, "inp"), c.in(weight, "weight"), inp.rows(),
                        inp.cols(), static_cast<float>(eps), c.h());
}

void CudaBackend::rmsnorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                                        const Tensor& inp, const Tensor& weight, const Tensor& rstd) {
  Call c(*this, s, "rmsnorm_backward");
  const int64_t n = inp.rows(), cols = inp.cols();
  const int blocks = partial_blocks(n);
  auto* pdw = static_cast<float*>(scratch(
      c.stream, Scratch::partials_a, static_cast<size_t>(blocks) * static_cast<size_t>(cols) * sizeof(float)));
  cuda::rmsnorm_backward(c.out(dinp, "dinp"), pdw, c.in(dout, "dout"), c.in(inp, "inp"), c.in(weight, "weight"),
                         c.in(rstd, "rstd"), n, cols, c.h());
  cuda::add_partials(c.out(dweight, "dweight"), pdw, blocks, cols, c.h());
}

void CudaBackend::gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) {
  Call c(*this, s, "gelu_forward");
  cuda::gelu_forward(c.out(out, "out"), c.in(inp, "inp"), inp.numel(), c.h());
}
void CudaBackend::gelu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Call c(*this, s, "gelu_backward");
  cuda::gelu_backward(c.out(dinp, "dinp"), c.in(inp, "inp"), c.in(dout, "dout"), inp.numel(), c.h());
}
void CudaBackend::relu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) {
  Call c(*this, s, "relu_forward");
  cuda::relu_forward(c.out(out, "out"), c.in(inp, "inp"), inp.numel(), c.h());
}
void CudaBackend::relu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Call c(*this, s, "relu_backward");
  cuda::relu_backward(c.out(dinp, "dinp"), c.in(inp, "inp"), c.in(dout, "dout"), inp.numel(), c.h());
}
void CudaBackend::swiglu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) {
  Call c(*this, s, "swiglu_forward");
  cuda::swiglu_forward(c.out(out, "out"), c.in(inp, "inp"), out.rows(), out.cols(), c.h());
}
void CudaBackend::swiglu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Call c(*this, s, "swiglu_backward");
  cuda::swiglu_backward(c.out(dinp, "dinp"), c.in(inp, "inp"), c.in(dout, "dout"), dout.rows(), dout.cols(), c.h());
}

void CudaBackend::rotary_impl(Stream& s, const Tensor& out, const Tensor& inp, const AttentionShape& sh, double theta,
                              bool inverse) {
  Call c(*this, s, "rotary");
  cuda::rotary(c.out(out, "out"), c.in(inp, "inp"), sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim, theta,
               inverse, c.h());
}

void CudaBackend::ce_local_max_impl(Stream& s, const Tensor& max, const Tensor& logits) {
  Call c(*this, s, "ce_local_max");
  cuda::ce_local_max(c.out(max, "max"), c.in(logits, "logits"), logits.rows(), logits.cols(), c.h());
}
void CudaBackend::ce_local_sum_exp_impl(Stream& s, const Tensor& sum_exp, const Tensor& logits, const Tensor& max) {
  Call c(*this, s, "ce_local_sum_exp");
  cuda::ce_local_sum_exp(c.out(sum_exp, "sum_exp"), c.in(logits, "logits"), c.in(max, "max"), logits.rows(),
                         logits.cols(), c.h());
}
void CudaBackend::ce_local_target_logit_impl(Stream& s, const Tensor& target_logit, const Tensor& logits,
                                             const Tensor& targets, int64_t vocab_begin) {
  Call c(*this, s, "ce_local_target_logit");
  cuda::ce_local_target_logit(c.out(target_logit, "target_logit"), c.in(logits, "logits"), c.ids(targets),
                              logits.rows(), logits.cols(), vocab_begin, c.h());
}
void CudaBackend::ce_combine_impl(Stream& s, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                                  const Tensor& target_logit) {
  Call c(*this, s, "ce_combine");
  cuda::ce_combine(c.out(losses, "losses"), c.in(max, "max"), c.in(sum_exp, "sum_exp"),
                   c.in(target_logit, "target_logit"), losses.numel(), c.h());
}
void CudaBackend::ce_backward_impl(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                   int64_t vocab_begin, const Tensor& max, const Tensor& sum_exp, double dloss_scale) {
  Call c(*this, s, "ce_backward");
  cuda::ce_backward(c.out(dlogits, "dlogits"), c.in(logits, "logits"), c.ids(targets), c.in(max, "max"),
                    c.in(sum_exp, "sum_exp"), logits.rows(), logits.cols(), vocab_begin,
                    static_cast<float>(dloss_scale), c.h());
}

void CudaBackend::sum_squares_impl(Stream& s, const Tensor& out, const Tensor& x) {
  Call c(*this, s, "sum_squares");
  const int blocks = grid_blocks(x.numel(), 256);
  auto* partials =
      static_cast<double*>(scratch(c.stream, Scratch::partials_sum, static_cast<size_t>(blocks) * sizeof(double)));
  cuda::sum_squares(c.out(out, "out"), c.in(x, "x"), x.numel(), partials, c.h());
}

void CudaBackend::clip_scale_impl(Stream& s, const Tensor& scale, const Tensor& sum_squares, double max_norm) {
  Call c(*this, s, "clip_scale");
  cuda::clip_scale(c.out(scale, "scale"), c.in(sum_squares, "sum_squares"), max_norm, c.h());
}

void CudaBackend::adamw_step_impl(Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m,
                                  const Tensor& v, const Tensor& scale, const AdamWConfig& cfg, int64_t step,
                                  const Tensor& model_copy) {
  Call c(*this, s, "adamw_step");
  AdamWArgs a{};
  a.learning_rate = static_cast<float>(cfg.learning_rate);
  a.beta1 = static_cast<float>(cfg.beta1);
  a.beta2 = static_cast<float>(cfg.beta2);
  a.eps = static_cast<float>(cfg.eps);
  a.weight_decay = static_cast<float>(cfg.weight_decay);
  a.correction1 = static_cast<float>(1.0 - std::pow(cfg.beta1, static_cast<double>(step)));
  a.correction2 = static_cast<float>(1.0 - std::pow(cfg.beta2, static_cast<double>(step)));
  cuda::adamw_step(c.out(params, "params"), c.in(grads, "grads"), c.out(m, "m"), c.out(v, "v"), c.in(scale, "scale"),
                   c.out(model_copy, "model_copy"), params.numel(), a, c.h());
}

}  // namespace cuda

// ---- public functions -------------------------------------------------------------------------

std::string_view cuda_attention_name(CudaAttention a) {
  switch (a) {
    case CudaAttention::automatic: return "auto";
    case CudaAttention::fused: return "fused";
    case CudaAttention::unfused: return "unfused";
    case CudaAttention::tensor_core: return "tensor_core";
  }
  return "?";
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  if (const std::string why = cuda_unavailable_reason(); !why.empty())
    throw Error("cuda backend: " + why).hint("run on a machine with an NVIDIA GPU, or use the cpu backend");
  return std::make_unique<cuda::CudaBackend>(options);
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("no CUDA device: {} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
  }
  if (count == 0) return "no CUDA device: the driver reports 0 GPUs";
  return "";
}

std::string CudaDeviceInfo::compute_capability() const { return fmt::format("{}.{}", compute_major, compute_minor); }

CudaDeviceInfo cuda_device_info(int device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw Error(fmt::format("cuda: device {} does not exist ({} visible)", device, count));
  cudaDeviceProp prop{};
  TP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  CudaDeviceInfo info;
  info.device = device;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  info.shared_bytes_per_block = prop.sharedMemPerBlockOptin;
  info.bf16 = prop.major >= 8;
  cuda::DeviceGuard guard(device);
  size_t free_bytes = 0, total_bytes = 0;
  TP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_bytes = static_cast<double>(free_bytes);
  TP_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  TP_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

int cuda_backend_device(const Backend& backend) {
  const cuda::CudaBackend* be = cuda::as_cuda(backend);
  return be ? be->device() : -1;
}

CudaBackendOptions cuda_backend_options(const Backend& backend) {
  const cuda::CudaBackend* be = cuda::as_cuda(backend);
  if (!be) throw Error(fmt::format("backend \"{}\" is not a cuda backend", backend.name()));
  CudaBackendOptions o = be->options();
  o.device = be->device();
  return o;
}

std::string cuda_attention_kernel(const Backend& backend, const AttentionShape& shape, DType dtype) {
  const cuda::CudaBackend* be = cuda::as_cuda(backend);
  if (!be) throw Error(fmt::format("backend \"{}\" is not a cuda backend", backend.name()));
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw Error(fmt::format("cuda_attention_kernel: dtype {}; the cuda backend computes in f32, bf16 and f16",
                            dtype_name(dtype)));
  const cuda::Dt t = dtype == DType::bf16 ? cuda::Dt::bf16 : dtype == DType::f16 ? cuda::Dt::f16 : cuda::Dt::f32;
  switch (be->attention_path(shape, t, {})) {  // no tensors: alignment is not part of the answer
    case cuda::CudaBackend::AttentionPath::tensor_core: return "tensor_core";
    case cuda::CudaBackend::AttentionPath::fused: return "fused";
    case cuda::CudaBackend::AttentionPath::unfused: return "unfused";
  }
  return "?";
}

size_t cuda_workspace_bytes(const Backend& backend) {
  const cuda::CudaBackend* be = cuda::as_cuda(backend);
  return be ? be->workspace_bytes() : 0;
}

void set_cuda_memory_note(Backend& backend, std::string note) {
  if (cuda::CudaBackend* be = cuda::as_cuda(backend)) be->set_memory_note(std::move(note));
}

}  // namespace trainplan::executor
