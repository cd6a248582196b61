// Every CUDA kernel except attention against the CPU reference on random inputs, in f32, f16
// and bf16 (where the GPU has it), under the named tolerances of gpu_test_util.hpp. Shapes are
// odd on purpose (partial warps and blocks, unaligned rows).
#include "gpu_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::gpu_testing;

TEST_CASE("cuda: fill, add, accumulate and the activations match the cpu backend", "[cuda]") {
  for (DType t : gpu_dtypes()) {
    INFO("dtype " << dtype_name(t));
    Both b(t);
    Rng rng(11);
    const Shape shape{37, 53};
    auto x = b.random(rng, shape), y = b.random(rng, shape);
    auto out = b.output(rng, shape);
    b.gpu->add(b.gs(), out.g, x.g, y.g);
    b.cpu->add(b.cs(), out.c, x.c, y.c);
    b.check("add", out, tolerance(t));
    b.gpu->add(b.gs(), x.g, x.g, y.g);  // in place: out is a
    b.cpu->add(b.cs(), x.c, x.c, y.c);
    b.check("add in place", x, tolerance(t));
    b.gpu->accumulate(b.gs(), y.g, out.g);
    b.cpu->accumulate(b.cs(), y.c, out.c);
    b.check("accumulate", y, tolerance(t));
    b.gpu->fill(b.gs(), out.g, 0.375);
    b.cpu->fill(b.cs(), out.c, 0.375);
    b.check("fill", out, tolerance(t));

    auto inp = b.random(rng, shape, 2.0), dout = b.random(rng, shape);
    auto act = b.output(rng, shape), dinp = b.output(rng, shape);
    b.gpu->gelu_forward(b.gs(), act.g, inp.g);
    b.cpu->gelu_forward(b.cs(), act.c, inp.c);
    b.check("gelu_forward", act, tolerance(t));
    b.gpu->gelu_backward(b.gs(), dinp.g, inp.g, dout.g);
    b.cpu->gelu_backward(b.cs(), dinp.c, inp.c, dout.c);
    b.check("gelu_backward", dinp, tolerance(t));
    b.gpu->relu_forward(b.gs(), act.g, inp.g);
    b.cpu->relu_forward(b.cs(), act.c, inp.c);
    b.check("relu_forward", act, tolerance(t));
    b.gpu->relu_backward(b.gs(), dinp.g, inp.g, dout.g);
    b.cpu->relu_backward(b.cs(), dinp.c, inp.c, dout.c);
    b.check("relu_backward", dinp, tolerance(t));

    auto gate_up = b.random(rng, {29, 2 * 45}, 1.5), dsw = b.random(rng, {29, 45});
    auto sw = b.output(rng, {29, 45}), dgate_up = b.output(rng, {29, 2 * 45});
    b.gpu->swiglu_forward(b.gs(), sw.g, gate_up.g);
    b.cpu->swiglu_forward(b.cs(), sw.c, gate_up.c);
    b.check("swiglu_forward", sw, tolerance(t));
    b.gpu->swiglu_backward(b.gs(), dgate_up.g, gate_up.g, dsw.g);
    b.cpu->swiglu_backward(b.cs(), dgate_up.c, gate_up.c, dsw.c);
    b.check("swiglu_backward", dgate_up, tolerance(t));
  }
}

TEST_CASE("cuda: embedding forward (vocab slice, accumulate) and backward (repeated ids) match the cpu backend",
          "[cuda]") {
  for (DType t : gpu_dtypes()) {
    INFO("dtype " << dtype_name(t));
    Both b(t);
    Rng rng(12);
    const int64_t n = 300, c = 70, rows = 40, row_begin = 25;
    // Ids in [0, 100): some below, some inside, some above the slice [25, 65); many repeats.
    auto ids = b.ids(random_ids(rng, n, 0, 100));
    auto table = b.random(rng, {rows, c});
    auto out = b.output(rng, {n, c});
    b.gpu->embedding_forward(b.gs(), out.g, ids.g, table.g, row_begin, false);
    b.cpu->embedding_forward(b.cs(), out.c, ids.c, table.c, row_begin, false);
    b.check("embedding_forward", out, tolerance(t));
    auto pos_ids = b.ids(random_ids(rng, n, 0, rows));
    b.gpu->embedding_forward(b.gs(), out.g, pos_ids.g, table.g, 0, true);
    b.cpu->embedding_forward(b.cs(), out.c, pos_ids.c, table.c, 0, true);
    b.check("embedding_forward accumulate", out, tolerance(t));

    auto dtable = b.random(rng, {rows, c}, 0.1);  // accumulates into existing values
    auto dout = b.random(rng, {n, c});
    b.gpu->embedding_backward(b.gs(), dtable.g, dout.g, ids.g, row_begin);
    b.cpu->embedding_backward(b.cs(), dtable.c, dout.c, ids.c, row_begin);
    b.check("embedding_backward", dtable, tolerance(t));
  }
}

TEST_CASE("cuda: layernorm and rmsnorm forward and backward match the cpu backend (f32 statistics)", "[cuda]") {
  for (DType t : gpu_dtypes()) {
    for (int64_t c : {24, 333, 1100}) {
      INFO("dtype " << dtype_name(t) << ", C " << c);
      Both b(t);
      Rng rng(13 + static_cast<uint64_t>(c));
      const int64_t n = 300;  // more rows than the partial blocks: several rows per block
      auto inp = b.random(rng, {n, c}, 2.0, {}, 0.5);
      auto w = b.random(rng, {c}, 0.5, {}, 1.0), bias = b.random(rng, {c}, 0.2);
      auto out = b.output(rng, {n, c});
      auto mean = b.output(rng, {n}, DType::f32), rstd = b.output(rng, {n}, DType::f32);
      b.gpu->layernorm_forward(b.gs(), out.g, mean.g, rstd.g, inp.g, w.g, bias.g, 1e-5);
      b.cpu->layernorm_forward(b.cs(), out.c, mean.c, rstd.c, inp.c, w.c, bias.c, 1e-5);
      b.check("layernorm_forward out", out, tolerance(t));
      b.check("layernorm_forward mean", mean, kF32Long);
      b.check("layernorm_forward rstd", rstd, kF32Long);

      auto dout = b.random(rng, {n, c});
      auto dinp = b.output(rng, {n, c});
      auto dw = b.random(rng, {c}, 0.1, DType::f32), db = b.random(rng, {c}, 0.1, DType::f32);
      b.gpu->layernorm_backward(b.gs(), dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g);
      b.cpu->layernorm_backward(b.cs(), dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c);
      b.check("layernorm_backward dinp", dinp, tolerance(t, true));
      b.check("layernorm_backward dweight", dw, kF32Long);
      b.check("layernorm_backward dbias", db, kF32Long);

      auto rms_out = b.output(rng, {n, c});
      auto rms_rstd = b.output(rng, {n}, DType::f32);
      b.gpu->rmsnorm_forward(b.gs(), rms_out.g, rms_rstd.g, inp.g, w.g, 1e-6);
      b.cpu->rmsnorm_forward(b.cs(), rms_out.c, rms_rstd.c, inp.c, w.c, 1e-6);
      b.check("rmsnorm_forward out", rms_out, tolerance(t));
      b.check("rmsnorm_forward rstd", rms_rstd, kF32Long);
      auto rms_dw = b.random(rng, {c}, 0.1, DType::f32);
      b.gpu->rmsnorm_backward(b.gs(), dinp.g, rms_dw.g, dout.g, inp.g, w.g, rms_rstd.g);
      b.cpu->rmsnorm_backward(b.cs(), dinp.c, rms_dw.c, dout.c, inp.c, w.c, rms_rstd.c);
      b.check("rmsnorm_backward dinp", dinp, tolerance(t, true));
      b.check("rmsnorm_backward dweight", rms_dw, kF32Long);
    }
  }
}

TEST_CASE("cuda: linear forward and backward (cuBLASLt, bias epilogue, accumulating gradients) match the cpu backend",
          "[cuda]") {
  struct Case {
    int64_t n, ic, oc;
  };
  for (DType t : gpu_dtypes()) {
    for (Case k : {Case{64, 128, 96}, Case{37, 53, 29}, Case{130, 24, 250}}) {
      INFO("dtype " << dtype_name(t) << ", N " << k.n << " IC " << k.ic << " OC " << k.oc);
      Both b(t);
      Rng rng(14 + static_cast<uint64_t>(k.n));
      auto inp = b.random(rng, {k.n, k.ic});
      auto w = b.random(rng, {k.oc, k.ic}, 0.2), bias = b.random(rng, {k.oc});
      auto out = b.output(rng, {k.n, k.oc});
      b.gpu->linear_forward(b.gs(), out.g, inp.g, w.g, bias.g);
      b.cpu->linear_forward(b.cs(), out.c, inp.c, w.c, bias.c);
      b.check("linear_forward with bias", out, tolerance(t));
      b.gpu->linear_forward(b.gs(), out.g, inp.g, w.g, Tensor());
      b.cpu->linear_forward(b.cs(), out.c, inp.c, w.c, Tensor());
      b.check("linear_forward without bias", out, tolerance(t));

      auto dout = b.random(rng, {k.n, k.oc});
      auto dinp = b.output(rng, {k.n, k.ic});
      // Gradients of weights accumulate into what is there; 16-bit products may write f32.
      auto dw = b.random(rng, {k.oc, k.ic}, 0.5), db = b.random(rng, {k.oc}, 0.5, DType::f32);
      b.gpu->linear_backward(b.gs(), dinp.g, dw.g, db.g, dout.g, inp.g, w.g);
      b.cpu->linear_backward(b.cs(), dinp.c, dw.c, db.c, dout.c, inp.c, w.c);
      b.check("linear_backward dinp", dinp, tolerance(t));
      b.check("linear_backward dweight", dw, tolerance(t, true));
      b.check("linear_backward dbias", db, kF32Long);
      if (t != DType::f32) {
        auto dw32 = b.random(rng, {k.oc, k.ic}, 0.5, DType::f32);
        b.gpu->linear_backward(b.gs(), Tensor(), dw32.g, Tensor(), dout.g, inp.g, w.g);
        b.cpu->linear_backward(b.cs(), Tensor(), dw32.c, Tensor(), dout.c, inp.c, w.c);
        b.check("linear_backward f32 dweight of 16-bit products", dw32, kF32Long);
      }
    }
  }
}

namespace {
// A CUDA backend with cuBLASLt's fused epilogues on or off (CudaBackendOptions::gemm_epilogues).
std::unique_ptr<Backend> epilogue_backend(bool epilogues) {
  CudaBackendOptions o;
  o.gemm_epilogues = epilogues;
  return make_cuda_backend(o);
}
}  // namespace

TEST_CASE("cuda: linear + residual (cuBLASLt C = residual, beta = 1, or unfused) matches the cpu backend", "[cuda]") {
  struct Case {
    int64_t n, ic, oc;
  };
  for (bool epilogues : {true, false})
    for (DType t : gpu_dtypes())
      for (Case k : {Case{64, 128, 96}, Case{37, 53, 29}}) {
        INFO("epilogues " << epilogues << ", dtype " << dtype_name(t) << ", N " << k.n << " IC " << k.ic << " OC "
                          << k.oc);
        Both b(t, epilogue_backend(epilogues));
        Rng rng(60 + static_cast<uint64_t>(k.n));
        auto inp = b.random(rng, {k.n, k.ic});
        auto w = b.random(rng, {k.oc, k.ic}, 0.2), bias = b.random(rng, {k.oc});
        auto residual = b.random(rng, {k.n, k.oc}), out = b.output(rng, {k.n, k.oc});
        b.gpu->linear_residual_forward(b.gs(), out.g, inp.g, w.g, bias.g, residual.g);
        b.cpu->linear_residual_forward(b.cs(), out.c, inp.c, w.c, bias.c, residual.c);
        b.check("out = linear + residual", out, tolerance(t));
        b.gpu->linear_residual_forward(b.gs(), residual.g, inp.g, w.g, Tensor(), residual.g);
        b.cpu->linear_residual_forward(b.cs(), residual.c, inp.c, w.c, Tensor(), residual.c);
        b.check("residual += linear, in place", residual, tolerance(t));
      }
}

TEST_CASE("cuda: linear + GELU (cuBLASLt GELU_AUX_BIAS / DGELU epilogues, or unfused) match the cpu backend",
          "[cuda]") {
  struct Case {
    int64_t n, ic, oc;  // the GELU's linear: ic -> oc; the next linear (backward): oc -> ic
  };
  // oc a multiple of 8: both epilogues apply; oc = 29: both fall back to the GELU kernel.
  for (bool epilogues : {true, false})
    for (DType t : gpu_dtypes())
      for (Case k : {Case{64, 96, 128}, Case{37, 53, 40}, Case{30, 24, 29}}) {
        INFO("epilogues " << epilogues << ", dtype " << dtype_name(t) << ", N " << k.n << " IC " << k.ic << " OC "
                          << k.oc);
        Both b(t, epilogue_backend(epilogues));
        Rng rng(40 + static_cast<uint64_t>(k.n));
        auto inp = b.random(rng, {k.n, k.ic});
        auto w = b.random(rng, {k.oc, k.ic}, 0.2), bias = b.random(rng, {k.oc});
        auto pre = b.output(rng, {k.n, k.oc}), out = b.output(rng, {k.n, k.oc});
        for (bool with_bias : {false, true}) {
          const Tensor gb = with_bias ? bias.g : Tensor(), cb = with_bias ? bias.c : Tensor();
          b.gpu->linear_gelu_forward(b.gs(), out.g, pre.g, inp.g, w.g, gb);
          b.cpu->linear_gelu_forward(b.cs(), out.c, pre.c, inp.c, w.c, cb);
          b.check(with_bias ? "pre with bias" : "pre", pre, tolerance(t));
          b.check(with_bias ? "gelu(pre) with bias" : "gelu(pre)", out, tolerance(t));
        }
        auto w2 = b.random(rng, {k.ic, k.oc}, 0.2), dout = b.random(rng, {k.n, k.ic});
        auto dpre = b.output(rng, {k.n, k.oc});
        auto dw2 = b.random(rng, {k.ic, k.oc}, 0.5), db2 = b.random(rng, {k.ic}, 0.5, DType::f32);
        b.gpu->linear_backward_gelu(b.gs(), dpre.g, dw2.g, db2.g, dout.g, out.g, w2.g, pre.g);
        b.cpu->linear_backward_gelu(b.cs(), dpre.c, dw2.c, db2.c, dout.c, out.c, w2.c, pre.c);
        b.check("dpre = gelu'(pre) * (dout W)", dpre, epilogues && t == DType::f32 ? kF32FastTanh : tolerance(t));
        b.check("dweight", dw2, tolerance(t, true));
        b.check("dbias", db2, kF32Long);
      }
}

TEST_CASE("cuda: rotary embedding matches the cpu backend, in place and inverse", "[cuda]") {
  for (DType t : gpu_dtypes()) {
    INFO("dtype " << dtype_name(t));
    Both b(t);
    Rng rng(15);
    const AttentionShape sh{2, 19, 4, 2, 16, true};
    auto qkv = b.random(rng, {sh.tokens(), sh.qkv_cols()});
    auto out = b.output(rng, {sh.tokens(), sh.qkv_cols()});
    b.gpu->rotary(b.gs(), out.g, qkv.g, sh, 10000.0, false);
    b.cpu->rotary(b.cs(), out.c, qkv.c, sh, 10000.0, false);
    b.check("rotary", out, tolerance(t));
    b.gpu->rotary(b.gs(), out.g, out.g, sh, 10000.0, true);
    b.cpu->rotary(b.cs(), out.c, out.c, sh, 10000.0, true);
    b.check("rotary inverse in place", out, tolerance(t));
    // The inverse undoes the rotation (an orthogonal map): back to the input, on the GPU alone.
    expect_close("rotary then inverse is the identity", b.got(out), b.want(qkv), tolerance(t));
  }
}

TEST_CASE("cuda: cross-entropy pieces, the combined loss and its backward match the cpu backend (vocab slice)",
          "[cuda]") {
  for (DType t : gpu_dtypes()) {
    INFO("dtype " << dtype_name(t));
    Both b(t);
    Rng rng(16);
    const int64_t n = 45, v = 1031, vocab_begin = 500;
    auto logits = b.random(rng, {n, v}, 3.0);
    // Targets in [0, 2000): some inside the local slice [500, 1531), some outside.
    auto targets = b.ids(random_ids(rng, n, 0, 2000));
    auto max = b.output(rng, {n}, DType::f32), sum_exp = b.output(rng, {n}, DType::f32);
    auto target_logit = b.output(rng, {n}, DType::f32), losses = b.output(rng, {n}, DType::f32);
    b.gpu->ce_local_max(b.gs(), max.g, logits.g);
    b.cpu->ce_local_max(b.cs(), max.c, logits.c);
    b.check("ce_local_max", max, kF32);
    b.gpu->ce_local_sum_exp(b.gs(), sum_exp.g, logits.g, max.g);
    b.cpu->ce_local_sum_exp(b.cs(), sum_exp.c, logits.c, max.c);
    b.check("ce_local_sum_exp", sum_exp, kF32Long);
    b.gpu->ce_local_target_logit(b.gs(), target_logit.g, logits.g, targets.g, vocab_begin);
    b.cpu->ce_local_target_logit(b.cs(), target_logit.c, logits.c, targets.c, vocab_begin);
    b.check("ce_local_target_logit", target_logit, kF32);
    b.gpu->ce_combine(b.gs(), losses.g, max.g, sum_exp.g, target_logit.g);
    b.cpu->ce_combine(b.cs(), losses.c, max.c, sum_exp.c, target_logit.c);
    b.check("ce_combine", losses, kF32Long);
    auto dlogits = b.output(rng, {n, v});
    b.gpu->ce_backward(b.gs(), dlogits.g, logits.g, targets.g, vocab_begin, max.g, sum_exp.g, 1.0 / 90.0);
    b.cpu->ce_backward(b.cs(), dlogits.c, logits.c, targets.c, vocab_begin, max.c, sum_exp.c, 1.0 / 90.0);
    b.check("ce_backward", dlogits, tolerance(t, true));
    // The whole loss on one rank, with 16-bit statistics as a model in one dtype keeps them.
    auto all_targets = b.ids(random_ids(rng, n, 0, v));
    auto l2 = b.output(rng, {n}), m2 = b.output(rng, {n}), s2 = b.output(rng, {n});
    b.gpu->cross_entropy_forward(b.gs(), l2.g, m2.g, s2.g, logits.g, all_targets.g);
    b.cpu->cross_entropy_forward(b.cs(), l2.c, m2.c, s2.c, logits.c, all_targets.c);
    b.check("cross_entropy_forward", l2, tolerance(t, true));
  }
}

TEST_CASE("cuda: sum of squares, clip scale and AdamW (f32 masters, 16-bit gradients and model copy) match the cpu "
          "backend",
          "[cuda]") {
  for (DType t : gpu_dtypes()) {
    INFO("dtype of gradients and model copy " << dtype_name(t));
    Both b(t);
    Rng rng(17);
    const int64_t p = 100003;  // several partial blocks, a ragged tail
    auto grads = b.random(rng, {p}, 0.01);
    auto ss = b.values({1}, {0.25}, DType::f32);  // sum_squares accumulates
    b.gpu->sum_squares(b.gs(), ss.g, grads.g);
    b.cpu->sum_squares(b.cs(), ss.c, grads.c);
    b.check("sum_squares", ss, kF32Long);
    for (double max_norm : {0.5, 1e9, 0.0}) {
      auto scale = b.output(rng, {1}, DType::f32);
      b.gpu->clip_scale(b.gs(), scale.g, ss.g, max_norm);
      b.cpu->clip_scale(b.cs(), scale.c, ss.c, max_norm);
      b.check("clip_scale", scale, kF32);
    }
    auto scale = b.values({1}, {0.7}, DType::f32);
    auto params = b.random(rng, {p}, 0.02, DType::f32);
    auto m = b.random(rng, {p}, 0.001, DType::f32);
    auto v = b.random(rng, {p}, 0.0005, DType::f32, 0.003);  // second moments stay positive
    auto copy = b.output(rng, {p});
    const AdamWConfig cfg{3e-4, 0.9, 0.95, 1e-8, 0.1};
    for (int64_t step : {1, 2, 7}) {
      b.gpu->adamw_step(b.gs(), params.g, grads.g, m.g, v.g, scale.g, cfg, step, copy.g);
      b.cpu->adamw_step(b.cs(), params.c, grads.c, m.c, v.c, scale.c, cfg, step, copy.c);
    }
    b.check("adamw params", params, kF32Long);
    b.check("adamw m", m, kF32Long);
    b.check("adamw v", v, kF32Long);
    b.check("adamw model copy", copy, tolerance(t, true));
  }
}

TEST_CASE("cuda: the backend rejects f64 and mismatched matrix-product dtypes with the kernel's name", "[cuda]") {
  auto gpu = make_backend("cuda");
  Stream& s = gpu->default_stream();
  CHECK_FALSE(gpu->supports(DType::f64));
  CHECK(gpu->supports(DType::f32));
  CHECK(gpu->supports(DType::f16));
  Tensor x64 = gpu->empty(DType::f64, {4});
  REQUIRE_ERROR_CONTAINS(gpu->fill(s, x64, 1.0), "fill: x is f64 (4)");
  Tensor inp = gpu->zeros(s, DType::f16, {4, 8});
  Tensor w = gpu->zeros(s, DType::f32, {3, 8});
  Tensor out = gpu->empty(DType::f32, {4, 3});
  REQUIRE_ERROR_CONTAINS(gpu->linear_forward(s, out, inp, w, Tensor()), "linear_forward: the cuda backend multiplies");
}
