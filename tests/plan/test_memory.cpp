// Memory model against the closed forms of Rajbhandari et al. 2020 (ZeRO) and Korthikanti et
// al. 2022 (activations), on catalog models.
#include "test_support.hpp"
#include "trainplan/plan/memory.hpp"

using namespace trainplan;

namespace {

plan::Plan make_plan(const std::string& model, const std::string& instance, int count, int dp, int tp, int pp) {
  plan::Plan p;
  p.model = model;
  p.instance_type = instance;
  p.instance_count = count;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.micro_batch = 1;
  p.global_batch = dp * 8;
  return p;
}

}  // namespace

TEST_CASE("plan memory: model states follow the ZeRO closed forms 16P, 4P+12P/N, 2P+14P/N, 16P/N", "[plan]") {
  const auto& cat = hw::Catalog::builtin();
  struct Case { const char* instance; int count, dp, pp; };
  for (Case c : {Case{"p4d.24xlarge", 1, 8, 1}, Case{"p4d.24xlarge", 8, 64, 1}, Case{"g5.12xlarge", 1, 2, 2}}) {
    plan::Plan p = make_plan("gpt3-1.3b", c.instance, c.count, c.dp, 1, c.pp);
    auto ctx = plan::resolve(p, cat, "test");
    plan::validate(p, ctx, "test");
    const double n = p.dp;
    for (int stage = 0; stage < p.pp; ++stage) {
      for (int zero : {0, 1}) {
        p.zero_stage = zero;
        auto m = plan::stage_memory(p, ctx, stage);
        const double psi = m.params_on_rank;
        REQUIRE(psi > 0);
        const double states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes;
        if (zero == 0) CHECK(states == Approx(16.0 * psi));
        if (zero == 1) CHECK(states == Approx(4.0 * psi + 12.0 * psi / n));
      }
    }
    if (p.pp == 1) {
      for (int zero : {2, 3}) {
        p.zero_stage = zero;
        auto m = plan::stage_memory(p, ctx, 0);
        const double psi = m.params_on_rank;
        const double states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes;
        if (zero == 2) CHECK(states == Approx(2.0 * psi + 14.0 * psi / n));
        if (zero == 3) CHECK(states == Approx(16.0 * psi / n));
      }
    }
  }
}

TEST_CASE("plan memory: Megatron-LM's bf16 keeps fp32 main grads: 18 bytes per parameter, 6 + 12/d with the distributed optimizer",
          "[plan]") {
  // Megatron-LM's distributed optimizer documentation: bf16 parameters with fp32 gradients take
  // 18 bytes per parameter (6 + 12/d distributed), fp16 parameters and gradients 16 (4 + 12/d
  // in the ZeRO form above). A stack without fp32 main grads keeps the 16.
  const auto& cat = hw::Catalog::builtin();
  for (const char* software : {"megatron-lm", "megatron-core"}) {
    for (Precision prec : {Precision::bf16, Precision::fp16}) {
      plan::Plan p = make_plan("gpt3-1.3b", "p4d.24xlarge", 1, 8, 1, 1);
      p.software = software;
      p.precision = prec;
      auto ctx = plan::resolve(p, cat, "test");
      const bool main_grads = std::string(software) == "megatron-lm" && prec == Precision::bf16;
      INFO(software << " " << precision_name(prec));
      const double n = p.dp;
      for (int zero : {0, 1}) {
        p.zero_stage = zero;
        const auto m = plan::stage_memory(p, ctx, 0);
        const double psi = m.params_on_rank;
        const double states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes;
        CHECK(m.gradients_bytes == Approx((main_grads ? 4.0 : 2.0) * psi));
        if (zero == 0) CHECK(states == Approx((main_grads ? 18.0 : 16.0) * psi));
        if (zero == 1) CHECK(states == Approx((main_grads ? 6.0 : 4.0) * psi + 12.0 * psi / n));
      }
    }
  }
}

TEST_CASE("plan memory: parameters on the ranks add up to the model (tp and pp shard them)", "[plan]") {
  const auto& cat = hw::Catalog::builtin();
  plan::Plan p = make_plan("gpt3-6.7b", "p4d.24xlarge", 2, 1, 4, 4);
  auto ctx = plan::resolve(p, cat, "test");
  plan::validate(p, ctx, "test");
  double sum = 0;
  for (int s = 0; s < p.pp; ++s) sum += plan::stage_memory(p, ctx, s).params_on_rank;
  // Norm weights and biases are replicated on the tp ranks and the tied embedding is kept
  // on the last stage too, so the tp ranks hold a bit more than P / tp in total.
  const double total = ctx.graph.total_params();
  const double embedding = static_cast<double>(ctx.model_spec.vocab) * ctx.model_spec.hidden;
  CHECK(sum * p.tp >= total);
  CHECK(sum * p.tp <= (total + embedding) * 1.01);
}

TEST_CASE("plan memory: GPT layer activations match Korthikanti et al. sbh(34 + 5as/h)", "[plan]") {
  const auto& spec = models::ModelCatalog::builtin().spec("gpt3-1.3b");
  auto graph = models::build_graph(spec);
  const double s = static_cast<double>(spec.seq_len), h = static_cast<double>(spec.hidden),
               a = static_cast<double>(spec.heads);
  const int64_t b = 4;
  const int unit = 3;  // a transformer block
  auto act = [&](int tp, bool sp, plan::Recompute r) {
    return plan::unit_activation_bytes(graph, unit, b, tp, sp, r, Precision::bf16, plan::AttentionImpl::unfused);
  };
  // Flash attention keeps no scores, only a 4-byte log-sum-exp per head and token: the
  // selective-recomputation numbers plus 4as bytes per sample (sharded by heads), with nothing
  // left for selective recomputation to drop.
  for (int t : {1, 2, 8})
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      const double lse = 4.0 * a * s * b / t;
      const double flash = plan::unit_activation_bytes(graph, unit, b, t, sp, plan::Recompute::none, Precision::bf16,
                                                       plan::AttentionImpl::flash);
      const double korthikanti_selective = sp ? s * b * h * 34.0 / t : s * b * h * (10.0 + 24.0 / t);
      CHECK(flash == Approx(korthikanti_selective + lse));
      CHECK(plan::unit_activation_bytes(graph, unit, b, t, sp, plan::Recompute::selective, Precision::bf16,
                                        plan::AttentionImpl::flash) == Approx(flash));
    }
  CHECK(act(1, false, plan::Recompute::none) == Approx(s * b * h * (34.0 + 5.0 * a * s / h)));
  for (int t : {2, 4, 8}) {
    CHECK(act(t, false, plan::Recompute::none) == Approx(s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t))));
    CHECK(act(t, true, plan::Recompute::none) == Approx(s * b * h / t * (34.0 + 5.0 * a * s / h)));
    CHECK(act(t, false, plan::Recompute::selective) == Approx(s * b * h * (10.0 + 24.0 / t)));
    CHECK(act(t, true, plan::Recompute::selective) == Approx(s * b * h * 34.0 / t));
    CHECK(act(t, true, plan::Recompute::full) == Approx(2.0 * s * b * h / t));
  }
  CHECK(act(1, false, plan::Recompute::full) == Approx(2.0 * s * b * h));
}

TEST_CASE("plan memory: micro-batches in flight per schedule and stage", "[plan]") {
  using plan::Schedule;
  const int p = 8;
  const int64_t m = 32;
  for (int i = 0; i < p; ++i) {
    CHECK(plan::micro_batches_in_flight(Schedule::gpipe, p, 1, m, i) == m);
    CHECK(plan::micro_batches_in_flight(Schedule::one_f_one_b, p, 1, m, i) == p - i);
  }
  CHECK(plan::micro_batches_in_flight(Schedule::one_f_one_b, p, 1, 4, 0) == 4);  // fewer than p
  // Interleaved, first stage: p * (1 + (p - 1) / (p * v)) (Korthikanti et al. 2022, sec. 4.2.3).
  for (int v : {2, 3, 4})
    CHECK(plan::micro_batches_in_flight(Schedule::interleaved_1f1b, p, v, m, 0) == Approx(p * (1.0 + (p - 1.0) / (p * v))));
}

TEST_CASE("plan memory: fits compares the total with usable GPU memory", "[plan]") {
  const auto& cat = hw::Catalog::builtin();
  // GPT-3 175B on one p4d: the model states alone (16 B x 175e9 / 8 GPUs = 350 GB per GPU)
  // cannot fit in 40 GB.
  plan::Plan big = make_plan("gpt3-175b", "p4d.24xlarge", 1, 1, 8, 1);
  auto ctx = plan::resolve(big, cat, "test");
  CHECK_FALSE(plan::peak_memory(big, ctx).fits());
  // GPT-2 124M with micro-batch 1 on one A100 easily fits.
  plan::Plan small = make_plan("gpt2-124m", "p4d.24xlarge", 1, 8, 1, 1);
  auto ctx2 = plan::resolve(small, cat, "test");
  auto m = plan::peak_memory(small, ctx2);
  CHECK(m.fits());
  CHECK(m.capacity_bytes == Approx(ctx2.gpu->memory_bytes * 0.97));
}

TEST_CASE("plan memory: the loss buffer is b*s*V/t bytes per logit of the loss (fp32 copy or fused on 16-bit logits)", "[plan]") {
  const auto& cat = hw::Catalog::builtin();
  plan::Plan p = make_plan("gpt2-124m", "p4d.24xlarge", 1, 8, 1, 1);
  p.micro_batch = 4;
  p.global_batch = 32;
  auto ctx = plan::resolve(p, cat, "test");
  const auto fp32 = plan::peak_memory(p, ctx);
  plan::MemoryOptions fused;
  fused.loss_bytes_per_logit = 2.0;
  const auto bf16 = plan::peak_memory(p, ctx, fused);
  const double logits = 4.0 * static_cast<double>(ctx.seq_len) * static_cast<double>(ctx.model_spec.vocab);
  CHECK(fp32.workspace_bytes - ctx.gpu->cublas_workspace_bytes == Approx(4.0 * logits));
  CHECK(bf16.workspace_bytes - ctx.gpu->cublas_workspace_bytes == Approx(2.0 * logits));
  CHECK(fp32.total_bytes() - bf16.total_bytes() == Approx(2.0 * logits));
}
