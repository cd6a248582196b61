// Attention on the CUDA backend, tensor-core (own flash-style wmma kernel), fused (own
// flash-style kernel on CUDA cores) and unfused (cuBLAS batched GEMMs + softmax kernels),
// forward (output and log-sum-exp) and backward (dqkv), against the CPU reference: causal and
// bidirectional, multi-head and grouped-query, head dims 16 to 256, sequence lengths that are
// not multiples of the tiles; the tensor-core kernel also against the CUDA-core one on a long
// sequence, and which kernel each option picks.
#include "gpu_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::gpu_testing;

namespace {

void check_attention(CudaAttention mode, const AttentionShape& sh, DType t, uint64_t seed) {
  CudaBackendOptions o;
  o.attention = mode;
  o.attention_workspace_bytes = size_t{1} << 20;  // small: the unfused path runs in head chunks
  Both b(t, make_cuda_backend(o));
  if (!b.gpu->supports(t)) return;
  Rng rng(seed);
  auto qkv = b.random(rng, {sh.tokens(), sh.qkv_cols()});
  auto out = b.output(rng, {sh.tokens(), sh.out_cols()});
  auto lse = b.output(rng, {sh.batch, sh.heads, sh.seq}, DType::f32);
  b.gpu->attention_forward(b.gs(), out.g, lse.g, qkv.g, sh);
  b.cpu->attention_forward(b.cs(), out.c, lse.c, qkv.c, sh);
  b.check("attention out", out, attention_tolerance(t));
  b.check("attention lse", lse, kF32Long);
  // The backward from the GPU's own forward results (as training does); the CPU from its own.
  auto dout = b.random(rng, {sh.tokens(), sh.out_cols()});
  auto dqkv = b.output(rng, {sh.tokens(), sh.qkv_cols()});
  b.gpu->attention_backward(b.gs(), dqkv.g, dout.g, qkv.g, out.g, lse.g, sh);
  b.cpu->attention_backward(b.cs(), dqkv.c, dout.c, qkv.c, out.c, lse.c, sh);
  b.check("attention dqkv", dqkv, attention_tolerance(t));
}

const AttentionShape kShapes[] = {
    {2, 37, 4, 2, 16, true},    // grouped-query, partial tiles
    {1, 70, 2, 2, 64, true},    // GPT-2 head dim
    {2, 33, 3, 1, 24, false},   // multi-query, bidirectional, head dim not a multiple of 32
    {1, 20, 2, 2, 128, true},   // Llama head dim
    {1, 9, 1, 1, 256, true},    // the fused kernel's largest head dim
};

// Shapes of the tensor-core kernel (tiles of 64 rows): every compiled head dim, sequences
// shorter than, equal to and beyond one tile, partial last tiles, MHA / GQA / MQA, causal and not.
const AttentionShape kTensorCoreShapes[] = {
    {2, 37, 4, 2, 16, true},     // grouped-query, one partial tile
    {1, 130, 2, 2, 64, true},    // GPT-2 head dim, three tiles, the last partial
    {2, 100, 3, 1, 32, false},   // multi-query, bidirectional
    {1, 64, 4, 1, 128, true},    // Llama head dim, exactly one tile
    {1, 150, 4, 2, 80, false},   // grouped-query, bidirectional, head dim 80
    {1, 200, 2, 2, 96, true},    // four tiles, the last partial
};

bool tensor_cores_here() { return cuda_device_info(0).compute_major >= 8; }

}  // namespace

TEST_CASE("cuda: tensor-core attention forward and backward match the cpu backend", "[cuda]") {
  if (!tensor_cores_here()) {
    WARN("not checked: the tensor-core attention needs compute capability 8.0");
    return;
  }
  uint64_t seed = 70;
  for (DType t : {DType::f16, DType::bf16})
    for (const AttentionShape& sh : kTensorCoreShapes) {
      INFO("dtype " << dtype_name(t) << ", B " << sh.batch << " T " << sh.seq << " H " << sh.heads << " KVH "
                    << sh.kv_heads << " D " << sh.head_dim << (sh.causal ? " causal" : ""));
      CudaBackendOptions o;
      o.attention = CudaAttention::tensor_core;
      REQUIRE(cuda_attention_kernel(*make_cuda_backend(o), sh, t) == "tensor_core");
      // P and dS enter the second products rounded to 16 bits, as in the unfused path: its
      // tolerances (attention_tolerance) apply.
      check_attention(CudaAttention::tensor_core, sh, t, ++seed);
    }
}

TEST_CASE("cuda: tensor-core and CUDA-core attention agree on a long sequence", "[cuda]") {
  if (!tensor_cores_here()) {
    WARN("not checked: the tensor-core attention needs compute capability 8.0");
    return;
  }
  const AttentionShape sh{2, 515, 8, 2, 64, true};
  for (DType t : {DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(t));
    CudaBackendOptions tc_options, fused_options;
    tc_options.attention = CudaAttention::tensor_core;
    fused_options.attention = CudaAttention::fused;
    Both tc(t, make_cuda_backend(tc_options));
    auto fused = make_cuda_backend(fused_options);
    Stream& fs = fused->default_stream();
    Rng rng(90);
    auto qkv = tc.random(rng, {sh.tokens(), sh.qkv_cols()});
    auto dout = tc.random(rng, {sh.tokens(), sh.out_cols()});
    auto upload = [&](const Both::Pair& p) {
      Tensor x = fused->empty(t, p.g.shape());
      fused->upload_values(fs, x, tc.got(p));
      return x;
    };
    const Tensor f_qkv = upload(qkv), f_dout = upload(dout);
    Tensor out = tc.gpu->empty(t, {sh.tokens(), sh.out_cols()}), lse = tc.gpu->empty(DType::f32, {2, 8, 515});
    Tensor f_out = fused->empty(t, out.shape()), f_lse = fused->empty(DType::f32, lse.shape());
    tc.gpu->attention_forward(tc.gs(), out, lse, qkv.g, sh);
    fused->attention_forward(fs, f_out, f_lse, f_qkv, sh);
    expect_close("out", tc.gpu->download_values(tc.gs(), out), fused->download_values(fs, f_out),
                 attention_tolerance(t));
    expect_close("lse", tc.gpu->download_values(tc.gs(), lse), fused->download_values(fs, f_lse), kF32Long);
    Tensor dqkv = tc.gpu->empty(t, qkv.g.shape()), f_dqkv = fused->empty(t, qkv.g.shape());
    tc.gpu->attention_backward(tc.gs(), dqkv, dout.g, qkv.g, out, lse, sh);
    fused->attention_backward(fs, f_dqkv, f_dout, f_qkv, f_out, f_lse, sh);
    expect_close("dqkv", tc.gpu->download_values(tc.gs(), dqkv), fused->download_values(fs, f_dqkv),
                 attention_tolerance(t));
  }
}

TEST_CASE("cuda: automatic attention takes the tensor-core kernel where it applies", "[cuda]") {
  auto gpu = make_cuda_backend();
  const AttentionShape gpt2{1, 1024, 12, 12, 64, true}, odd_dim{1, 1024, 4, 4, 24, true};
  const std::string tc = tensor_cores_here() ? "tensor_core" : "unfused";
  CHECK(cuda_attention_kernel(*gpu, gpt2, DType::f16) == tc);
  CHECK(cuda_attention_kernel(*gpu, gpt2, DType::f32) == "unfused");  // f32: its T x T workspace fits 1 GiB
  CHECK(cuda_attention_kernel(*gpu, odd_dim, DType::f16) == "unfused");
  CudaBackendOptions o;
  o.attention = CudaAttention::tensor_core;
  auto forced = make_cuda_backend(o);
  CHECK(cuda_attention_kernel(*forced, gpt2, DType::f16) == (tensor_cores_here() ? "tensor_core" : "fused"));
  CHECK(cuda_attention_kernel(*forced, odd_dim, DType::f16) == "fused");  // not compiled for 24: CUDA cores
  o.attention = CudaAttention::fused;
  CHECK(cuda_attention_kernel(*make_cuda_backend(o), gpt2, DType::f16) == "fused");
}

TEST_CASE("cuda: fused attention forward and backward match the cpu backend", "[cuda]") {
  uint64_t seed = 30;
  for (DType t : gpu_dtypes())
    for (const AttentionShape& sh : kShapes) {
      INFO("dtype " << dtype_name(t) << ", B " << sh.batch << " T " << sh.seq << " H " << sh.heads << " KVH "
                    << sh.kv_heads << " D " << sh.head_dim << (sh.causal ? " causal" : ""));
      // Head dim 256 needs ~97 KiB of shared memory per block: not on sm_75 (64 KiB).
      if (sh.head_dim == 256 && cuda_device_info(0).shared_bytes_per_block < 100000) continue;
      check_attention(CudaAttention::fused, sh, t, ++seed);
    }
}

TEST_CASE("cuda: unfused attention (cuBLAS batched GEMMs, chunked heads) matches the cpu backend", "[cuda]") {
  uint64_t seed = 50;
  for (DType t : gpu_dtypes())
    for (const AttentionShape& sh : kShapes) {
      INFO("dtype " << dtype_name(t) << ", B " << sh.batch << " T " << sh.seq << " H " << sh.heads << " KVH "
                    << sh.kv_heads << " D " << sh.head_dim << (sh.causal ? " causal" : ""));
      check_attention(CudaAttention::unfused, sh, t, ++seed);
    }
}

TEST_CASE("cuda: the fused attention refuses head dims beyond its limit, naming the alternative", "[cuda]") {
  CudaBackendOptions o;
  o.attention = CudaAttention::fused;
  auto gpu = make_cuda_backend(o);
  Stream& s = gpu->default_stream();
  const AttentionShape sh{1, 4, 1, 1, 512, true};
  Tensor qkv = gpu->zeros(s, DType::f32, {4, 3 * 512}), out = gpu->empty(DType::f32, {4, 512});
  Tensor lse = gpu->empty(DType::f32, {1, 1, 4});
  REQUIRE_ERROR_CONTAINS(gpu->attention_forward(s, out, lse, qkv, sh), "head_dim 512");
  REQUIRE_ERROR_CONTAINS(gpu->attention_forward(s, out, lse, qkv, sh), "CudaAttention::unfused");
}
