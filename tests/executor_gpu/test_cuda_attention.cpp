// Attention on the CUDA backend, fused (own flash-style kernel) and unfused (cuBLAS batched
// GEMMs + softmax kernels), forward (output and log-sum-exp) and backward (dqkv), against the
// CPU reference: causal and bidirectional, multi-head and grouped-query, head dims 16 to 256,
// sequence lengths that are not multiples of the tiles.
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

}  // namespace

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
