// Memory events of plan::lower(): replaying a rank's activation alloc/free tasks in program
// order gives the memory model's activation peak (plan::stage_memory, Korthikanti et al. 2022
// per layer x micro-batches in flight) where that closed form is exact, and the closed forms
// below where recomputation or unequal interleaved chunks make it an approximation.
#include <functional>

#include "test_lower_fixture.hpp"

using namespace trainplan;
using testing::PlanSpec;

namespace {

// Saved activations of one op for one micro-batch on one tp rank (memory.hpp's rules).
double op_saved(const plan::Plan& p, const plan::PlanContext& ctx, const models::Op& op) {
  double bytes = op.saved_bytes(p.precision_or(ctx.precision)) * static_cast<double>(p.micro_batch);
  if (p.sequence_parallel || op.saved_tp_sharded) bytes /= p.tp;
  return bytes;
}

double unit_bytes(const plan::Plan& p, const plan::PlanContext& ctx, int u, plan::Recompute r) {
  return plan::unit_activation_bytes(ctx.graph, u, p.micro_batch, p.tp, p.sequence_parallel, r, p.precision_or(ctx.precision),
                                     p.attention);
}

// Units of a single-chunk stage.
std::vector<int> stage_units(const plan::Plan& p, int stage) {
  std::vector<int> out;
  for (int u = p.stages[static_cast<size_t>(stage)].first_unit; u <= p.stages[static_cast<size_t>(stage)].last_unit; ++u) out.push_back(u);
  return out;
}

// How far a unit's backward rises above what its forward kept, with selective recomputation:
// a dropped op is re-materialized after the ops behind it released theirs.
double selective_excursion(const plan::Plan& p, const plan::PlanContext& ctx, int u) {
  const auto& ops = ctx.graph.units()[static_cast<size_t>(u)].ops;
  double released = 0, most = 0;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    const auto& op = ctx.graph.ops()[static_cast<size_t>(*it)];
    if (op.dropped_by_selective_recompute) most = std::max(most, op_saved(p, ctx, op) - released);
    else released += op_saved(p, ctx, op);
  }
  return most;
}

void check_stages(const PlanSpec& s, const std::function<double(const plan::Plan&, const plan::PlanContext&, int)>& expected) {
  auto r = testing::resolve_plan(s);
  for (auto gran : {plan::Granularity::op, plan::Granularity::layer}) {
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
    for (int stage = 0; stage < s.pp; ++stage) {
      INFO(testing::describe(s) << " stage " << stage << (gran == plan::Granularity::op ? " op" : " layer"));
      const double peak = testing::activation_peak(prog.ranks[static_cast<size_t>(prog.rank_of(0, s.tp - 1, stage))]);
      CHECK(peak == Approx(expected(r->plan, r->ctx, stage)).epsilon(1e-12));
      CHECK(peak == Approx(plan::activation_peak_bytes(r->plan, r->ctx, stage)).epsilon(1e-12));
    }
  }
}

std::vector<PlanSpec> pipelines(plan::Recompute recompute, int64_t seq_len) {
  std::vector<PlanSpec> out;
  for (const char* model : {"gpt2-124m", "llama2-7b"})
    for (auto schedule : {plan::Schedule::gpipe, plan::Schedule::one_f_one_b})
      for (int tp : {1, 2})
        for (int pp : {1, 4})
          for (int64_t m : {2, 8}) {
            PlanSpec s;
            s.model = model;
            s.schedule = schedule;
            s.tp = tp;
            s.sp = tp > 1 && m == 8;
            s.pp = pp;
            s.micro_batches = m;
            s.micro_batch = 2;
            s.seq_len = seq_len;
            s.recompute = recompute;
            out.push_back(s);
          }
  return out;
}

// Korthikanti-style closed form: micro-batches in flight x one micro-batch of the stage.
double closed_form(const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
  double per_mb = 0;  // every chunk of the stage
  for (int c = 0; c < p.vp; ++c) {
    const auto& a = p.stages[static_cast<size_t>(c * p.pp + stage)];
    for (int u = a.first_unit; u <= a.last_unit; ++u) per_mb += unit_bytes(p, ctx, u, p.recompute);
  }
  return per_mb * plan::micro_batches_in_flight(p.schedule, p.pp, p.vp, p.num_micro_batches, stage);
}

// What the memory model reports, which must equal the replayed program.
double stage_model(const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
  return plan::stage_memory(p, ctx, stage).activations_bytes;
}

}  // namespace

TEST_CASE("lower: replayed activation peak equals the memory model for GPipe and 1F1B without recomputation", "[plan][lower]") {
  for (const PlanSpec& s : pipelines(plan::Recompute::none, 512)) {
    check_stages(s, closed_form);
    check_stages(s, stage_model);
  }
}

TEST_CASE("lower: with selective recomputation the peak adds one re-materialized attention core beyond what its layer released", "[plan][lower]") {
  // Every micro-batch in flight keeps sbh(34)-style activations (memory model); during the
  // first backward each layer re-materializes its attention scores after its MLP freed its
  // own: the excess over the memory model is max over units of (excursion - what later units
  // of the stage already released), when positive. Long sequences make it positive for GPT-2.
  for (int64_t seq : {64, 1024})
    for (const PlanSpec& s : pipelines(plan::Recompute::selective, seq))
      check_stages(s, [](const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
        const std::vector<int> units = stage_units(p, stage);
        double excess = 0, later = 0;
        for (auto it = units.rbegin(); it != units.rend(); ++it) {
          excess = std::max(excess, selective_excursion(p, ctx, *it) - later);
          later += unit_bytes(p, ctx, *it, plan::Recompute::selective);
        }
        CHECK(stage_model(p, ctx, stage) == Approx(closed_form(p, ctx, stage) + excess).epsilon(1e-12));
        return closed_form(p, ctx, stage) + excess;
      });
}

TEST_CASE("lower: with full recomputation the peak is the kept inputs plus the largest re-materialized unit less inputs already released", "[plan][lower]") {
  // The memory model adds the largest unit's full activations to every kept input; when that
  // unit is re-materialized the inputs of the stage's later units (same micro-batch) are
  // already released: peak = N * C + max_u (full(u) - sum of inputs of units after u). The
  // embedding and the head are not recomputed (plan::unit_recompute): C holds all they save,
  // and nothing is re-materialized in their backward.
  for (const PlanSpec& s : pipelines(plan::Recompute::full, 512))
    check_stages(s, [](const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
      const auto mem = plan::stage_memory(p, ctx, stage);
      const std::vector<int> units = stage_units(p, stage);
      double kept = 0, largest = 0, best = -1e300, later = 0;
      for (int u : units) {
        kept += unit_bytes(p, ctx, u, plan::Recompute::full);
        largest = std::max(largest, unit_bytes(p, ctx, u, plan::Recompute::none));
      }
      for (auto it = units.rbegin(); it != units.rend(); ++it) {
        const bool layer = ctx.graph.units()[static_cast<size_t>(*it)].name.rfind("block", 0) == 0;
        best = std::max(best, (layer ? unit_bytes(p, ctx, *it, plan::Recompute::none) : 0.0) - later);
        later += unit_bytes(p, ctx, *it, plan::Recompute::full);
      }
      (void)largest;
      CHECK(mem.activations_bytes == Approx(kept * mem.micro_batches_in_flight + best).epsilon(1e-12));
      return kept * mem.micro_batches_in_flight + best;
    });
}

TEST_CASE("lower: interleaved 1F1B peak matches the memory model on stages whose chunks are equal", "[plan][lower]") {
  // GPT-3 1.3B has 24 layers: pp 4 x vp 2 chunks of 3 layers. Stages 1 and 2 hold two equal
  // chunks; stage 0 adds the embedding to its first chunk and stage 3 the head to its last, so
  // there the peak depends on which chunks are in flight (activation_peak_bytes replays it).
  for (auto rc : {plan::Recompute::none, plan::Recompute::selective}) {
    PlanSpec s;
    s.model = "gpt3-1.3b";
    s.pp = 4;
    s.vp = 2;
    s.tp = 2;
    s.micro_batches = 8;
    s.schedule = plan::Schedule::interleaved_1f1b;
    s.recompute = rc;
    check_stages(s, [](const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
      if ((stage == 1 || stage == 2) && p.recompute == plan::Recompute::none) return closed_form(p, ctx, stage);
      return plan::activation_peak_bytes(p, ctx, stage);
    });
  }
  // m == p: Megatron runs every forward first, so all m * v chunks are in flight.
  PlanSpec s;
  s.model = "gpt3-1.3b";
  s.pp = 4;
  s.vp = 2;
  s.micro_batches = 4;
  s.schedule = plan::Schedule::interleaved_1f1b;
  check_stages(s, [](const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
    double all = 0;
    for (int c = 0; c < p.vp; ++c) {
      const auto& a = p.stages[static_cast<size_t>(c * p.pp + stage)];
      for (int u = a.first_unit; u <= a.last_unit; ++u) all += unit_bytes(p, ctx, u, plan::Recompute::none);
    }
    return all * static_cast<double>(p.num_micro_batches);
  });
}

TEST_CASE("lower: activation_peak_bytes equals the replayed program on the whole grid", "[plan][lower]") {
  for (const PlanSpec& s : testing::plan_grid()) {
    INFO(testing::describe(s));
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    for (const auto& rp : prog.ranks)
      CHECK(testing::activation_peak(rp) == Approx(plan::activation_peak_bytes(r->plan, r->ctx, rp.pp_rank)).epsilon(1e-12));
  }
}

TEST_CASE("lower: the memory model's short replay equals the whole program with many micro-batches", "[plan][lower]") {
  // activation_peak_bytes replays at most 2*pp micro-batches (1F1B, interleaved) or one
  // (GPipe, then adds the rest linearly); the lowered program has all of them.
  for (auto schedule : {plan::Schedule::gpipe, plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b})
    for (auto rc : {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}) {
      PlanSpec s;
      s.model = "gpt3-1.3b";
      s.pp = 4;
      s.vp = schedule == plan::Schedule::interleaved_1f1b ? 2 : 1;
      s.micro_batches = 24;
      s.schedule = schedule;
      s.recompute = rc;
      check_stages(s, stage_model);
    }
}

TEST_CASE("lower: static bytes and the workspace peak come from the memory model", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.pp = 2;
  s.tp = 2;
  s.dp = 2;
  s.zero = 1;
  s.micro_batch = 2;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx);
  for (const auto& rp : prog.ranks) {
    const auto mem = plan::stage_memory(r->plan, r->ctx, rp.pp_rank);
    CHECK(rp.static_bytes == Approx(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes));
    double live = 0, peak = 0;
    for (const auto& t : rp.tasks) {
      if (t.buffer != plan::BufferKind::workspace) continue;
      live += t.kind == plan::TaskKind::alloc ? t.alloc_bytes : -t.alloc_bytes;
      peak = std::max(peak, live);
    }
    CHECK(peak == Approx(mem.workspace_bytes));
  }
}
