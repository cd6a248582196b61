// Matrix products of the CUDA backend: linear forward / backward through cuBLASLt (bias and
// GELU epilogues, heuristic algorithm cached per shape, types, epilogue and alignment), and
// attention: the tensor-core or CUDA-core fused kernels, or the unfused path of cuBLAS
// strided-batched GEMMs around softmax kernels.
//
// Row-major tensors are handed to the column-major BLAS as their transposes: a row-major
// (r, c) matrix with leading dimension ld is the column-major (c, r) matrix with the same ld.
// So out (N,OC) = inp (N,IC) W^T (W is (OC,IC)) becomes out^T (OC,N) = W (OC,IC) inp^T (IC,N):
// A = W stored as column-major (IC,OC) -> transa = T; B = inp stored as (IC,N) -> transb = N.
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "backend_impl.hpp"
#include "check.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor::cuda {
namespace {

cudaDataType_t cuda_type(Dt t) {
  switch (t) {
    case Dt::bf16: return CUDA_R_16BF;
    case Dt::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// Largest power of two (up to 256) dividing the address: the alignment cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

int to_int(int64_t v, std::string_view what) {
  if (v > INT_MAX) throw Error(fmt::format("cuda: {} = {} exceeds the BLAS int range", what, v));
  return static_cast<int>(v);
}

template <class H, class Destroy>
struct Handle {
  H h = nullptr;
  Destroy destroy;
  explicit Handle(Destroy d) : destroy(d) {}
  ~Handle() {
    if (h) (void)destroy(h);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

}  // namespace

struct CudaBackend::GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;  // C = D (in place when beta != 0) unless c is set
  int64_t ldd = 0;
  const void* c = nullptr;  // C when beta != 0 and it is not D: same type and layout as D
  Dt ab = Dt::f32, cd = Dt::f32;
  float alpha = 1, beta = 0;
  const void* bias = nullptr;  // CUBLASLT_EPILOGUE_BIAS, m values of type cd
  // GELU epilogues; aux is m x n of type cd with leading dimension ldd (a multiple of 8).
  // forward: D = gelu(alpha A B + bias), aux = alpha A B + bias (GELU_AUX[_BIAS]);
  // backward: D = gelu'(aux) * (alpha A B) (DGELU; beta must be 0).
  enum class Gelu { none, forward, backward } gelu = Gelu::none;
  void* aux = nullptr;
};

struct CudaBackend::AlgoCache {
  // Key: transposes, shape, leading dimensions, types, epilogue, tf32, alignments.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, bool,
                         uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>;
  std::map<Key, std::pair<bool, cublasLtMatmulAlgo_t>> algos;  // first: found
};

void CudaBackend::lt_matmul(CudaStream& stream, const GemmCall& c) {
  if (!algo_cache_) algo_cache_ = std::make_shared<AlgoCache>();
  const bool tf32 = c.ab == Dt::f32 && options_.tf32;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t ab = cuda_type(c.ab), cd = cuda_type(c.cd);

  Handle<cublasLtMatmulDesc_t, decltype(&cublasLtMatmulDescDestroy)> op(cublasLtMatmulDescDestroy);
  TP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.h, compute, CUDA_R_32F));
  const cublasOperation_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TP_ASSERT(c.gelu == GemmCall::Gelu::none || (c.aux != nullptr && c.ldd % 8 == 0));
  TP_ASSERT(c.gelu != GemmCall::Gelu::backward || (c.beta == 0 && c.bias == nullptr));
  cublasLtEpilogue_t epilogue = c.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (c.gelu == GemmCall::Gelu::forward) epilogue = c.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (c.gelu == GemmCall::Gelu::backward) epilogue = CUBLASLT_EPILOGUE_DGELU;
  TP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (c.bias) {
    TP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
    const int32_t bias_type = cd;
    TP_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  if (c.gelu != GemmCall::Gelu::none) {  // the aux matrix has D's type (cuBLASLt's default) and layout
    TP_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof(c.aux)));
    const int64_t aux_ld = c.ldd;
    TP_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  using Layout = Handle<cublasLtMatrixLayout_t, decltype(&cublasLtMatrixLayoutDestroy)>;
  Layout la(cublasLtMatrixLayoutDestroy), lb(cublasLtMatrixLayoutDestroy), ld(cublasLtMatrixLayoutDestroy);
  // Stored (column-major) shapes: op(A) is m x k, op(B) is k x n, D is m x n.
  TP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.h, ab, static_cast<uint64_t>(c.trans_a ? c.k : c.m),
                                             static_cast<uint64_t>(c.trans_a ? c.m : c.k), c.lda));
  TP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.h, ab, static_cast<uint64_t>(c.trans_b ? c.n : c.k),
                                             static_cast<uint64_t>(c.trans_b ? c.k : c.n), c.ldb));
  TP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.h, cd, static_cast<uint64_t>(c.m), static_cast<uint64_t>(c.n), c.ldd));

  void* workspace = scratch(stream, Scratch::gemm, options_.gemm_workspace_bytes);
  const uint32_t align_a = alignment_of(c.a), align_b = alignment_of(c.b), align_d = alignment_of(c.d);
  const uint32_t align_bias = c.bias ? alignment_of(c.bias) : 256;
  const uint32_t align_aux = c.aux ? alignment_of(c.aux) : 256;
  const void* c_ptr = c.c ? c.c : c.d;
  const uint32_t align_c = alignment_of(c_ptr);
  const AlgoCache::Key key{c.trans_a, c.trans_b, c.m,  c.n,     c.k,     c.lda,   c.ldb,   c.ldd,
                           static_cast<int>(c.ab), static_cast<int>(c.cd), static_cast<int>(epilogue), tf32,
                           align_a, align_b, std::min(align_c, align_d), align_bias, align_aux};
  auto it = algo_cache_->algos.find(key);
  if (it == algo_cache_->algos.end()) {
    Handle<cublasLtMatmulPreference_t, decltype(&cublasLtMatmulPreferenceDestroy)> pref(
        cublasLtMatmulPreferenceDestroy);
    TP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
    const uint64_t ws = options_.gemm_workspace_bytes;
    TP_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    TP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                         sizeof(align_a)));
    TP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                         sizeof(align_b)));
    TP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                         sizeof(align_c)));
    TP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                         sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt_, op.h, la.h, lb.h, ld.h, ld.h, pref.h, 1, &result, &found);
    const bool ok = status == CUBLAS_STATUS_SUCCESS && found > 0;
    it = algo_cache_->algos.emplace(key, std::make_pair(ok, result.algo)).first;
  }
  if (!it->second.first) {
    if (c.c && c.c != c.d && c.beta != 0) {  // C into D first: the fallbacks below read C from D
      TP_ASSERT(c.ldd == c.m);                 // D and C contiguous
      TP_CUDA_CHECK(cudaMemcpyAsync(c.d, c.c, static_cast<size_t>(c.m * c.n * dt_size(c.cd)), cudaMemcpyDeviceToDevice,
                                    stream.handle()));
      GemmCall in_place = c;
      in_place.c = nullptr;
      lt_matmul(stream, in_place);
      return;
    }
    if (c.gelu != GemmCall::Gelu::none) {  // no GELU epilogue for this case: product, then the GELU kernel
      GemmCall plain = c;
      plain.gelu = GemmCall::Gelu::none;
      plain.aux = nullptr;
      const int64_t count = c.m * c.n;
      if (c.gelu == GemmCall::Gelu::forward) {
        plain.d = c.aux;  // aux = A B + bias, D = gelu(aux)
        lt_matmul(stream, plain);
        cuda::gelu_forward(DevPtr{c.d, c.cd}, CDevPtr{c.aux, c.cd}, count, stream.handle());
      } else {
        lt_matmul(stream, plain);  // D = A B, then D = gelu'(aux) * D in place
        cuda::gelu_backward(DevPtr{c.d, c.cd}, CDevPtr{c.aux, c.cd}, CDevPtr{c.d, c.cd}, count, stream.handle());
      }
      return;
    }
    if (c.bias) {  // the bias epilogue is not available for this case: plain product + bias kernel
      GemmCall plain = c;
      plain.bias = nullptr;
      lt_matmul(stream, plain);
      add_bias_rows(DevPtr{c.d, c.cd}, CDevPtr{c.bias, c.cd}, c.n, c.m, stream.handle());
      return;
    }
    // No cuBLASLt algorithm (e.g. leading dimensions too unaligned for its kernels): the
    // classic cuBLAS GEMM handles any layout.
    batched_gemm(stream, c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, c.a, c.ab, c.lda, 0, c.b, c.ldb, 0, c.beta, c.d,
                 c.cd, c.ldd, 0, 1);
    return;
  }
  TP_CUBLAS_CHECK(cublasLtMatmul(lt_, op.h, &c.alpha, c.a, la.h, c.b, lb.h, &c.beta, c_ptr, ld.h, c.d, ld.h,
                                 &it->second.second, workspace, options_.gemm_workspace_bytes, stream.handle()));
}

void CudaBackend::batched_gemm(CudaStream& stream, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const void* a, Dt ab_type, int64_t lda, int64_t stride_a, const void* b,
                               int64_t ldb, int64_t stride_b, float beta, void* c, Dt c_type, int64_t ldc,
                               int64_t stride_c, int64_t batch) {
  void* workspace = scratch(stream, Scratch::gemm, options_.gemm_workspace_bytes);
  TP_CUBLAS_CHECK(cublasSetStream(cublas_, stream.handle()));
  TP_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace, options_.gemm_workspace_bytes));
  const bool tf32 = ab_type == Dt::f32 && options_.tf32;
  TP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(m, "m"),
      to_int(n, "n"), to_int(k, "k"), &alpha, a, cuda_type(ab_type), to_int(lda, "lda"), stride_a, b,
      cuda_type(ab_type), to_int(ldb, "ldb"), stride_b, &beta, c, cuda_type(c_type), to_int(ldc, "ldc"), stride_c,
      to_int(batch, "batch"), tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---- linear ------------------------------------------------------------------------------------

namespace {
// The dtype of a product's inputs, which must agree.
Dt product_type(const Tensor& a, std::string_view a_arg, const Tensor& b, std::string_view b_arg,
                std::string_view kernel) {
  const Dt ta = device_dtype(a, kernel, a_arg), tb = device_dtype(b, kernel, b_arg);
  if (ta != tb)
    throw Error(fmt::format("{}: the cuda backend multiplies {} and {} in one dtype, got {} and {}", kernel, a_arg,
                            b_arg, a.describe(), b.describe()))
        .hint("keep a 16-bit copy of the weights for the products (AdamW's model_copy)");
  return ta;
}
// The dtype of a product's output: the inputs' dtype, or f32 for 16-bit inputs.
Dt output_type(const Tensor& out, std::string_view arg, Dt inputs, std::string_view kernel) {
  const Dt t = device_dtype(out, kernel, arg);
  if (t != inputs && t != Dt::f32)
    throw Error(fmt::format("{}: {} is {}; a product of {} inputs writes {} or f32", kernel, arg, out.describe(),
                            inputs == Dt::bf16 ? "bf16" : "f16", inputs == Dt::bf16 ? "bf16" : "f16"));
  if (inputs == Dt::f32 && t != Dt::f32)
    throw Error(fmt::format("{}: {} is {}; a product of f32 inputs writes f32", kernel, arg, out.describe()));
  return t;
}
}  // namespace

// out (N,OC) = inp (N,IC) W^T (W is (OC,IC)).
CudaBackend::GemmCall CudaBackend::linear_call(const Tensor& out, const Tensor& inp, const Tensor& weight,
                                               std::string_view kernel) const {
  const int64_t n = inp.rows(), ic = inp.cols(), oc = weight.dim(0);
  const Dt ab = product_type(inp, "inp", weight, "weight", kernel);
  GemmCall c;
  c.trans_a = true;
  c.trans_b = false;
  c.m = oc;
  c.n = n;
  c.k = ic;
  c.a = weight.data();
  c.lda = ic;
  c.b = inp.data();
  c.ldb = ic;
  c.d = out.data();
  c.ldd = oc;
  c.ab = ab;
  c.cd = output_type(out, "out", ab, kernel);
  return c;
}

// dinp (N,IC) = dout (N,OC) W (OC,IC): dinp^T (IC,N) = W^T (IC,OC) dout^T (OC,N).
CudaBackend::GemmCall CudaBackend::dinp_call(const Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                             std::string_view kernel) const {
  const int64_t n = dout.rows(), ic = weight.dim(1), oc = weight.dim(0);
  const Dt ab = product_type(dout, "dout", weight, "weight", kernel);
  GemmCall c;
  c.m = ic;
  c.n = n;
  c.k = oc;
  c.a = weight.data();
  c.lda = ic;
  c.b = dout.data();
  c.ldb = oc;
  c.d = dinp.data();
  c.ldd = ic;
  c.ab = ab;
  c.cd = output_type(dinp, "dinp", ab, kernel);
  return c;
}

void CudaBackend::linear_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                      const Tensor& bias) {
  constexpr std::string_view kernel = "linear_forward";
  DeviceGuard guard(device_);
  CudaStream& cs = stream_of(s);
  const int64_t n = inp.rows(), ic = inp.cols(), oc = weight.dim(0);
  GemmCall c = linear_call(out, inp, weight, kernel);
  if (ic == 0) {  // an empty sum: out = bias (or 0)
    cuda::fill(dev(out, kernel, "out"), out.numel(), 0.0f, cs.handle());
    if (bias.defined()) add_bias_rows(dev(out, kernel, "out"), cdev(bias, kernel, "bias"), n, oc, cs.handle());
    return;
  }
  const bool epilogue = bias.defined() && bias.dtype() == out.dtype();
  if (epilogue) c.bias = bias.data();
  lt_matmul(cs, c);
  if (bias.defined() && !epilogue) add_bias_rows(dev(out, kernel, "out"), cdev(bias, kernel, "bias"), n, oc, cs.handle());
}

void CudaBackend::linear_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                       const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  constexpr std::string_view kernel = "linear_backward";
  DeviceGuard guard(device_);
  CudaStream& cs = stream_of(s);
  const int64_t n = inp.rows(), ic = inp.cols(), oc = weight.dim(0);
  if (dinp.defined() && dinp.numel() > 0) {
    if (oc == 0) {
      cuda::fill(dev(dinp, kernel, "dinp"), dinp.numel(), 0.0f, cs.handle());
    } else {
      lt_matmul(cs, dinp_call(dinp, dout, weight, kernel));
    }
  }
  if (dweight.defined() && dweight.numel() > 0 && n > 0) {
    // dW (OC,IC) += dout^T (OC,N) inp (N,IC): dW^T (IC,OC) += inp^T (IC,N) dout (N,OC).
    const Dt ab = product_type(inp, "inp", dout, "dout", kernel);
    GemmCall c;
    c.trans_b = true;
    c.m = ic;
    c.n = oc;
    c.k = n;
    c.a = inp.data();
    c.lda = ic;
    c.b = dout.data();
    c.ldb = oc;
    c.d = dweight.data();
    c.ldd = ic;
    c.ab = ab;
    c.cd = output_type(dweight, "dweight", ab, kernel);
    c.beta = 1;
    lt_matmul(cs, c);
  }
  if (dbias.defined() && oc > 0 && n > 0) {
    const int blocks = partial_blocks(n);
    auto* partials = static_cast<float*>(scratch(
        cs, Scratch::partials_a, static_cast<size_t>(blocks) * static_cast<size_t>(oc) * sizeof(float)));
    column_sum_partials(partials, cdev(dout, kernel, "dout"), n, oc, cs.handle());
    add_partials(dev(dbias, kernel, "dbias"), partials, blocks, oc, cs.handle());
  }
}

// The residual as cuBLASLt's C with beta = 1 (CudaBackendOptions::gemm_epilogues): out = inp W^T
// + bias + residual in one product, when out, residual and the bias share a dtype.
void CudaBackend::linear_residual_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                               const Tensor& bias, const Tensor& residual) {
  if (!options_.gemm_epilogues || inp.cols() == 0 || residual.dtype() != out.dtype() ||
      (bias.defined() && bias.dtype() != out.dtype())) {
    Backend::linear_residual_forward_impl(s, out, inp, weight, bias, residual);
    return;
  }
  DeviceGuard guard(device_);
  GemmCall c = linear_call(out, inp, weight, "linear_residual_forward");
  c.bias = bias.defined() ? bias.data() : nullptr;
  c.c = residual.data();
  c.beta = 1;
  lt_matmul(stream_of(s), c);
}

// The GELU epilogues (CudaBackendOptions::gemm_epilogues): the aux matrix (pre) in the output's
// dtype with a leading dimension that is a multiple of 8; otherwise the unfused default.
void CudaBackend::linear_gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& pre, const Tensor& inp,
                                           const Tensor& weight, const Tensor& bias) {
  const int64_t ic = inp.cols(), oc = weight.dim(0);
  if (!options_.gemm_epilogues || ic == 0 || oc % 8 != 0 || pre.dtype() != out.dtype() ||
      (bias.defined() && bias.dtype() != out.dtype())) {
    Backend::linear_gelu_forward_impl(s, out, pre, inp, weight, bias);
    return;
  }
  DeviceGuard guard(device_);
  GemmCall c = linear_call(out, inp, weight, "linear_gelu_forward");
  c.bias = bias.defined() ? bias.data() : nullptr;
  c.gelu = GemmCall::Gelu::forward;
  c.aux = pre.data();
  lt_matmul(stream_of(s), c);
}

void CudaBackend::linear_backward_gelu_impl(Stream& s, const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                            const Tensor& dout, const Tensor& act, const Tensor& weight,
                                            const Tensor& pre) {
  const int64_t ic = act.cols(), oc = weight.dim(0);
  if (!options_.gemm_epilogues || oc == 0 || dpre.numel() == 0 || ic % 8 != 0 || pre.dtype() != dpre.dtype()) {
    Backend::linear_backward_gelu_impl(s, dpre, dweight, dbias, dout, act, weight, pre);
    return;
  }
  {
    DeviceGuard guard(device_);
    GemmCall c = dinp_call(dpre, dout, weight, "linear_backward_gelu");
    c.gelu = GemmCall::Gelu::backward;
    c.aux = pre.data();
    lt_matmul(stream_of(s), c);
  }
  linear_backward_impl(s, Tensor(), dweight, dbias, dout, act, weight);  // dW and db as linear_backward
}

// ---- attention ---------------------------------------------------------------------------------

namespace {
AttnDims dims_of(const AttentionShape& sh) {
  return AttnDims{sh.batch, sh.seq,   sh.heads, sh.kv_heads, sh.head_dim, sh.causal,
                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim)))};
}
Dt attention_type(const Tensor& qkv, std::initializer_list<std::pair<const Tensor*, std::string_view>> others,
                  std::string_view kernel) {
  const Dt t = device_dtype(qkv, kernel, "qkv");
  for (const auto& [tensor, arg] : others)
    if (tensor->dtype() != qkv.dtype())
      throw Error(fmt::format("{}: {} is {}; the cuda attention keeps qkv, out, dout and dqkv in one dtype ({})",
                              kernel, arg, tensor->describe(), qkv.describe()));
  return t;
}
const std::byte* bytes(const Tensor& t) { return static_cast<const std::byte*>(t.data()); }
std::byte* bytes_mut(const Tensor& t) { return static_cast<std::byte*>(t.data()); }
}  // namespace

size_t CudaBackend::unfused_bytes_per_head(int64_t seq, Dt dtype, bool backward) const {
  const auto tt = static_cast<size_t>(seq) * static_cast<size_t>(seq);
  const size_t element = static_cast<size_t>(dt_size(dtype));
  return backward ? tt * (2 * sizeof(float) + 2 * element) : tt * (sizeof(float) + element);
}

std::string CudaBackend::tensor_core_attention_gap(const AttentionShape& shape, Dt dtype) const {
  if (dtype != Dt::bf16 && dtype != Dt::f16) return "f32 (it takes bf16 or f16)";
  if (info_.compute_major < 8)
    return fmt::format("compute capability {} (it needs 8.0)", info_.compute_capability());
  if (!tensor_core_attention_head_dim(shape.head_dim))
    return fmt::format("head_dim {} (it is compiled for 16, 32, 64, 80, 96 and 128)", shape.head_dim);
  const auto need = static_cast<size_t>(tensor_core_attention_shared_bytes(shape.head_dim));
  if (need > info_.shared_bytes_per_block)
    return fmt::format("head_dim {} needs {} bytes of shared memory per block, the GPU has {}", shape.head_dim, need,
                       info_.shared_bytes_per_block);
  return {};
}

CudaBackend::AttentionPath CudaBackend::attention_path(const AttentionShape& shape, Dt dtype,
                                                       std::initializer_list<const Tensor*> tensors) const {
  if (options_.attention == CudaAttention::fused) return AttentionPath::fused;
  if (options_.attention == CudaAttention::unfused) return AttentionPath::unfused;
  std::string gap = tensor_core_attention_gap(shape, dtype);
  for (const Tensor* t : tensors)
    if (gap.empty() && reinterpret_cast<uintptr_t>(t->data()) % 16 != 0)
      gap = "a tensor not 16-byte aligned (a view at an odd offset)";
  if (gap.empty()) return AttentionPath::tensor_core;
  // Explicit fallback, said once per reason and process: automatic keeps its old rule
  // (unfused while the T x T workspace of one head fits), tensor_core takes the fused kernel.
  const bool unfused = options_.attention == CudaAttention::automatic &&
                       unfused_bytes_per_head(shape.seq, dtype, true) <= options_.attention_workspace_bytes;
  const AttentionPath path = unfused ? AttentionPath::unfused : AttentionPath::fused;
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::string line = fmt::format("trainplan: cuda attention: the tensor-core kernel does not take {}; running the "
                                       "{} kernel",
                                       gap, unfused ? "unfused (cuBLAS)" : "fused (CUDA cores)");
  std::lock_guard lock(mutex);
  if (said.insert(line).second) fmt::print(stderr, "{}\n", line);
  return path;
}

void CudaBackend::check_fused_attention(const AttentionShape& shape, std::string_view kernel) const {
  const auto need = static_cast<size_t>(fused_attention_shared_bytes(shape.head_dim));
  if (shape.head_dim > kFusedAttentionMaxHeadDim || need > info_.shared_bytes_per_block)
    throw Error(fmt::format("{}: the fused cuda attention handles head_dim up to {} within {} bytes of shared memory "
                            "per block on this GPU; head_dim {} needs {}",
                            kernel, kFusedAttentionMaxHeadDim, info_.shared_bytes_per_block, shape.head_dim, need))
        .hint("use CudaAttention::unfused for this shape");
}

void CudaBackend::attention_forward_impl(Stream& s, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                         const AttentionShape& shape) {
  constexpr std::string_view kernel = "attention_forward";
  DeviceGuard guard(device_);
  CudaStream& cs = stream_of(s);
  const Dt t = attention_type(qkv, {{&out, "out"}}, kernel);
  switch (attention_path(shape, t, {&out, &qkv})) {
    case AttentionPath::unfused: attention_forward_unfused(cs, out, lse, qkv, shape); return;
    case AttentionPath::tensor_core:
      attention_forward_tc(t, out.data(), dev(lse, kernel, "lse"), qkv.data(), dims_of(shape), cs.handle());
      return;
    case AttentionPath::fused: break;
  }
  check_fused_attention(shape, kernel);
  attention_forward_fused(t, out.data(), dev(lse, kernel, "lse"), qkv.data(), dims_of(shape), cs.handle());
}

void CudaBackend::attention_backward_impl(Stream& s, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                          const Tensor& out, const Tensor& lse, const AttentionShape& shape) {
  constexpr std::string_view kernel = "attention_backward";
  DeviceGuard guard(device_);
  CudaStream& cs = stream_of(s);
  const Dt t = attention_type(qkv, {{&out, "out"}, {&dout, "dout"}, {&dqkv, "dqkv"}}, kernel);
  const AttentionPath path = attention_path(shape, t, {&dqkv, &dout, &qkv, &out});
  if (path == AttentionPath::unfused) {
    attention_backward_unfused(cs, dqkv, dout, qkv, out, lse, shape);
    return;
  }
  if (path == AttentionPath::fused) check_fused_attention(shape, kernel);
  const auto rows = static_cast<size_t>(shape.batch * shape.heads * shape.seq);
  auto* dvec = static_cast<float*>(scratch(cs, Scratch::attention_dvec, rows * sizeof(float)));
  auto* run = path == AttentionPath::tensor_core ? &attention_backward_tc : &attention_backward_fused;
  run(t, dqkv.data(), dout.data(), qkv.data(), out.data(), cdev(lse, kernel, "lse"), dvec, dims_of(shape),
      cs.handle());
}

// Per batch element b, query offset j in each KV group and chunk of KV heads [kv0, kv0 + cnt):
// S = scale Q K^T (fp32), P = softmax(S), O = P V, with Q of heads (kv0 + i) G + j.
void CudaBackend::attention_forward_unfused(CudaStream& cs, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                            const AttentionShape& sh) {
  const AttnDims d = dims_of(sh);
  const Dt t = device_dtype(qkv, "attention_forward", "qkv");
  const int64_t T = sh.seq, D = sh.head_dim, H = sh.heads, KVH = sh.kv_heads, G = H / KVH, row = d.qkv_row();
  const int64_t es = dt_size(t);
  const int64_t per_head = static_cast<int64_t>(unfused_bytes_per_head(T, t, false));
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(options_.attention_workspace_bytes) / per_head, 1, KVH);
  auto* scores = static_cast<float*>(scratch(cs, Scratch::attention_s, static_cast<size_t>(chunk * T * T) * 4));
  void* probs = scratch(cs, Scratch::attention_p, static_cast<size_t>(chunk * T * T * es));
  const DevPtr lse_ptr = dev(lse, "attention_forward", "lse");
  for (int64_t b = 0; b < sh.batch; ++b)
    for (int64_t kv0 = 0; kv0 < KVH; kv0 += chunk) {
      const int64_t cnt = std::min(chunk, KVH - kv0);
      for (int64_t j = 0; j < G; ++j) {
        const std::byte* base = bytes(qkv) + b * T * row * es;
        const std::byte* q = base + (kv0 * G + j) * D * es;
        const std::byte* k = base + (H + kv0) * D * es;
        const std::byte* v = base + (H + KVH + kv0) * D * es;
        // S^T (T_k, T_q) col-major = K (T_k, D) Q^T (D, T_q).
        batched_gemm(cs, true, false, T, T, D, d.scale, k, t, row, D, q, row, G * D, 0.0f, scores, Dt::f32, T, T * T,
                     cnt);
        attention_softmax_forward(t, probs, lse_ptr, scores, d, AttnChunk{b, j, kv0, cnt}, cs.handle());
        // O^T (D, T_q) = V^T (D, T_k) P^T (T_k, T_q).
        std::byte* o = bytes_mut(out) + (b * T * H * D + (kv0 * G + j) * D) * es;
        batched_gemm(cs, false, false, D, T, T, 1.0f, v, t, row, D, probs, T, T * T, 0.0f, o, t, H * D, G * D, cnt);
      }
    }
}

void CudaBackend::attention_backward_unfused(CudaStream& cs, const Tensor& dqkv, const Tensor& dout,
                                             const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                             const AttentionShape& sh) {
  const AttnDims d = dims_of(sh);
  const Dt t = device_dtype(qkv, "attention_backward", "qkv");
  const int64_t T = sh.seq, D = sh.head_dim, H = sh.heads, KVH = sh.kv_heads, G = H / KVH, row = d.qkv_row();
  const int64_t es = dt_size(t);
  const int64_t per_head = static_cast<int64_t>(unfused_bytes_per_head(T, t, true));
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(options_.attention_workspace_bytes) / per_head, 1, KVH);
  const auto tt = static_cast<size_t>(chunk * T * T);
  auto* scores = static_cast<float*>(scratch(cs, Scratch::attention_s, tt * 4));
  auto* dprobs = static_cast<float*>(scratch(cs, Scratch::attention_dp, tt * 4));
  void* probs = scratch(cs, Scratch::attention_p, tt * static_cast<size_t>(es));
  void* dscores = scratch(cs, Scratch::attention_ds, tt * static_cast<size_t>(es));
  const CDevPtr lse_ptr = cdev(lse, "attention_backward", "lse");
  for (int64_t b = 0; b < sh.batch; ++b)
    for (int64_t kv0 = 0; kv0 < KVH; kv0 += chunk) {
      const int64_t cnt = std::min(chunk, KVH - kv0);
      for (int64_t j = 0; j < G; ++j) {
        const float accumulate = j > 0 ? 1.0f : 0.0f;  // dK, dV sum over the G query heads
        const std::byte* base = bytes(qkv) + b * T * row * es;
        const std::byte* q = base + (kv0 * G + j) * D * es;
        const std::byte* k = base + (H + kv0) * D * es;
        const std::byte* v = base + (H + KVH + kv0) * D * es;
        const std::byte* g = bytes(dout) + (b * T * H * D + (kv0 * G + j) * D) * es;
        std::byte* dbase = bytes_mut(dqkv) + b * T * row * es;
        std::byte* dq = dbase + (kv0 * G + j) * D * es;
        std::byte* dk = dbase + (H + kv0) * D * es;
        std::byte* dv = dbase + (H + KVH + kv0) * D * es;
        batched_gemm(cs, true, false, T, T, D, d.scale, k, t, row, D, q, row, G * D, 0.0f, scores, Dt::f32, T, T * T,
                     cnt);
        // dP^T (T_k, T_q) = V (T_k, D) dO^T (D, T_q).
        batched_gemm(cs, true, false, T, T, D, 1.0f, v, t, row, D, g, H * D, G * D, 0.0f, dprobs, Dt::f32, T, T * T,
                     cnt);
        attention_softmax_backward(t, probs, dscores, scores, dprobs, lse_ptr, dout.data(), out.data(), d,
                                   AttnChunk{b, j, kv0, cnt}, cs.handle());
        // dV^T (D, T_k) (+)= dO^T (D, T_q) P (T_q, T_k).
        batched_gemm(cs, false, true, D, T, T, 1.0f, g, t, H * D, G * D, probs, T, T * T, accumulate, dv, t, row, D,
                     cnt);
        // dQ^T (D, T_q) = K^T (D, T_k) dS^T (T_k, T_q).
        batched_gemm(cs, false, false, D, T, T, 1.0f, k, t, row, D, dscores, T, T * T, 0.0f, dq, t, row, G * D, cnt);
        // dK^T (D, T_k) (+)= Q^T (D, T_q) dS (T_q, T_k).
        batched_gemm(cs, false, true, D, T, T, 1.0f, q, t, row, G * D, dscores, T, T * T, accumulate, dk, t, row, D,
                     cnt);
      }
    }
}

}  // namespace trainplan::executor::cuda
