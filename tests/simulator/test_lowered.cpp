// The simulator on programs lowered from real plans (plan::lower).
#include <string>

#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;

namespace {

struct Lowered {
  plan::Plan plan;
  plan::PlanContext ctx;
};

Lowered resolve(const std::string& model, int nodes, int dp, int tp, int pp, int64_t global_batch,
                plan::Schedule schedule = plan::Schedule::one_f_one_b, int zero = 0, int cp = 1) {
  plan::Plan p;
  p.model = model;
  p.instance_type = "p4d.24xlarge";
  p.instance_count = nodes;
  p.dp = dp, p.tp = tp, p.pp = pp, p.cp = cp;
  p.global_batch = global_batch;
  p.micro_batch = 1;
  p.schedule = schedule;
  p.zero_stage = zero;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin());
  plan::validate(p, ctx);
  return {p, std::move(ctx)};
}

}  // namespace

TEST_CASE("simulator: a lowered dp x tp x pp step agrees at full and symmetric fidelity", "[simulator]") {
  Lowered l = resolve("gpt3-350m", 2, 2, 2, 4, 16);
  plan::LowerOptions lo;
  lo.granularity = plan::Granularity::layer;
  plan::StepProgram full_prog = plan::lower(l.plan, l.ctx, lo);
  REQUIRE(plan::check_program(full_prog).empty());
  lo.representatives_only = true;
  plan::StepProgram reps = plan::lower(l.plan, l.ctx, lo);
  sim::SimOptions opt = sim::options_for(l.plan);
  auto full = sim::simulate_step(full_prog, l.ctx.cluster, opt);
  opt.fidelity = sim::Fidelity::symmetric;
  auto sym = sim::simulate_step(reps, l.ctx.cluster, opt);
  CHECK(sym.step_time_s == Approx(full.step_time_s).epsilon(1e-9));
  CHECK(sym.breakdown.bubble_s == Approx(full.breakdown.bubble_s).epsilon(1e-9).margin(1e-12));
  for (size_t r = 0; r < full.peak_memory_bytes.size(); ++r) {
    CHECK(sym.peak_memory_bytes[r] == Approx(full.peak_memory_bytes[r]).epsilon(1e-12));
    CHECK(sym.bytes_sent[r] == Approx(full.bytes_sent[r]).epsilon(1e-9));
  }
  const auto& b = full.breakdown;
  CHECK(b.compute_s + b.optimizer_s + b.bubble_s + b.other_s + b.exposed_comm_total_s() ==
        Approx(full.step_time_s).epsilon(1e-12));
  CHECK(b.exposed_comm(plan::CommPurpose::tp) > 0);
  CHECK(b.bubble_s > 0);
  // Deterministic.
  auto again = sim::simulate_step(full_prog, l.ctx.cluster, sim::options_for(l.plan));
  CHECK(json::dump(plan::to_json(again.timeline)) == json::dump(plan::to_json(full.timeline)));
}

TEST_CASE("simulator: a lowered ZeRO-3 step moves 1.5x the data-parallel bytes of ZeRO-0", "[simulator]") {
  // dp only, one node: the data-parallel traffic is the only traffic.
  auto bytes_for = [](int zero) {
    // Untied embeddings: every parameter is gathered once per pass (a tied LM head re-gathers
    // the word embedding it reads, which adds to ZeRO-3).
    Lowered l = resolve("llama2-7b", 1, 8, 1, 1, 8, plan::Schedule::one_f_one_b, zero);
    l.plan.bucket_size_bytes = 1e12;  // one bucket: no rounding differences between stages
    auto r = sim::simulate_step(plan::lower(l.plan, l.ctx), l.ctx.cluster, sim::options_for(l.plan));
    double total = 0;
    for (double v : r.bytes_sent_by_purpose) total += v;
    return total;
  };
  CHECK(bytes_for(3) / bytes_for(0) == Approx(1.5).epsilon(0.01));
}

TEST_CASE("simulator: a lowered dp x cp x tp x pp step agrees at full and symmetric fidelity, with its cp traffic", "[simulator]") {
  // The cp ranks of a replica are one symmetry class: a representatives-only program renames
  // them by a (dp, cp) translation. K, V all-gathers and dK, dV reduce-scatters: 3 per layer
  // and micro-batch, ring traffic (cp - 1)/cp of S = 2 s kv d b elem / tp each per rank.
  Lowered l = resolve("gpt3-350m", 2, 2, 2, 2, 8, plan::Schedule::one_f_one_b, 1, 2);
  plan::LowerOptions lo;
  lo.granularity = plan::Granularity::layer;
  lo.memory_events = false;
  plan::StepProgram full_prog = plan::lower(l.plan, l.ctx, lo);
  REQUIRE(plan::check_program(full_prog).empty());
  lo.representatives_only = true;
  plan::StepProgram reps = plan::lower(l.plan, l.ctx, lo);
  sim::SimOptions opt = sim::options_for(l.plan);
  opt.record_timeline = false;
  auto full = sim::simulate_step(full_prog, l.ctx.cluster, opt);
  opt.fidelity = sim::Fidelity::symmetric;
  auto sym = sim::simulate_step(reps, l.ctx.cluster, opt);
  CHECK(sym.step_time_s == Approx(full.step_time_s).epsilon(1e-9));
  for (size_t r = 0; r < full.bytes_sent.size(); ++r) CHECK(sym.bytes_sent[r] == Approx(full.bytes_sent[r]).epsilon(1e-9));
  const auto& m = l.ctx.model_spec;
  const double S = 2.0 * static_cast<double>(l.ctx.seq_len) * static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim()) * 2.0 / 2;
  const double per_rank = 3.0 * static_cast<double>(m.layers) / 2 * static_cast<double>(l.plan.num_micro_batches) * S / 2;  // pp 2, (cp-1)/cp = 1/2
  CHECK(full.bytes_sent_by_purpose[static_cast<size_t>(plan::CommPurpose::cp)] == Approx(16 * per_rank).epsilon(1e-9));
  CHECK(full.breakdown.exposed_comm(plan::CommPurpose::cp) > 0);
  const auto& b = full.breakdown;
  CHECK(b.compute_s + b.optimizer_s + b.bubble_s + b.other_s + b.exposed_comm_total_s() == Approx(full.step_time_s).epsilon(1e-12));
}
