// Context parallelism (plan::Plan::cp) in the plan library: validation, the rank layout and
// groups, the K, V all-gathers and dK, dV reduce-scatters of every attention (closed forms of
// their sizes and their order in the program), the work split, pipeline messages and the
// memory model against the replayed program.
#include <algorithm>
#include <functional>
#include <set>

#include "test_lower_fixture.hpp"
#include "trainplan/plan/op_cost.hpp"

using namespace trainplan;
using testing::PlanSpec;

namespace {

// Bytes of the whole sequence's K and V of one layer for one micro-batch on one tp rank:
// 2 s kv_heads head_dim b elem / tp.
double kv_bytes(const plan::PlanContext& ctx, const PlanSpec& s, double elem = 2.0) {
  const auto& m = ctx.model_spec;
  return 2.0 * static_cast<double>(ctx.seq_len) * static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim()) *
         static_cast<double>(s.micro_batch) * elem / s.tp;
}

int attention_layers(const plan::PlanContext& ctx) {
  int n = 0;
  for (const auto& op : ctx.graph.ops()) n += op.kind == models::OpKind::attention ? 1 : 0;
  return n;
}

double step_flops(const plan::StepProgram& prog, const std::function<bool(const plan::Task&)>& pick) {
  double f = 0;
  for (const auto& rp : prog.ranks)
    for (const auto& t : rp.tasks)
      if (t.kind == plan::TaskKind::compute && t.phase != plan::Phase::optimizer && pick(t)) f += t.flops;
  return f;
}

}  // namespace

TEST_CASE("plan: cp needs a transformer, a sequence split into 2*cp chunks and dp*tp*pp*cp GPUs", "[plan]") {
  PlanSpec s;
  s.model = "llama2-7b";
  s.cp = 2;
  s.seq_len = 96;  // 96 % 4 == 0
  CHECK_NOTHROW(testing::resolve_plan(s));
  s.seq_len = 98;  // 98 % 4 != 0
  REQUIRE_ERROR_CONTAINS(testing::resolve_plan(s), "test: /parallelism/cp: cp = 2 needs a sequence length divisible by 2*cp = 4, got 98");
  s.model = "resnet-tiny";
  s.seq_len = 0;
  REQUIRE_ERROR_CONTAINS(testing::resolve_plan(s), "test: /parallelism/cp: context parallelism is not modelled for resnet models");
  // The GPU count includes cp.
  plan::Plan p;
  p.model = "llama2-7b";
  p.instance_type = "p4d.24xlarge";
  p.instance_count = 1;
  p.dp = 8, p.cp = 2;
  p.global_batch = 16;
  p.micro_batch = 1;
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  REQUIRE_ERROR_CONTAINS(plan::validate(p, ctx, "plan.json"), "plan.json: /parallelism: dp*tp*pp*cp = 8*1*1*2 = 16 but the cluster has 8 GPUs");
  // cp round-trips through the plan file, and defaults to 1.
  p.dp = 4;
  const plan::Plan back = plan::parse_plan(plan::to_json(p), "x");
  CHECK(back.cp == 2);
  CHECK(back.world_size() == 8);
  json::Json j = plan::to_json(p);
  j["parallelism"].erase("cp");
  CHECK(plan::parse_plan(j, "x").cp == 1);
}

TEST_CASE("lower: with cp, rank = ((pp*dp + dp_rank)*cp + cp_rank)*tp + tp_rank, with tp, cp and dp*cp groups", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.dp = 2, s.tp = 2, s.pp = 2, s.cp = 2;
  s.zero = 1;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
  REQUIRE(plan::check_program(prog) == "");
  REQUIRE(prog.world_size == 16);
  CHECK(prog.cp == 2);
  std::set<int> seen;
  for (int pp = 0; pp < 2; ++pp)
    for (int d = 0; d < 2; ++d)
      for (int c = 0; c < 2; ++c)
        for (int t = 0; t < 2; ++t) {
          const int rank = ((pp * 2 + d) * 2 + c) * 2 + t;
          CHECK(prog.rank_of(d, t, pp, c) == rank);
          const auto& rp = prog.ranks[static_cast<size_t>(rank)];
          CHECK((rp.dp_rank == d && rp.tp_rank == t && rp.pp_rank == pp && rp.cp_rank == c));
          CHECK(prog.symmetry_class[static_cast<size_t>(rank)] == ((pp * 2) * 2) * 2 + t);
          seen.insert(rank);
        }
  CHECK(seen.size() == 16);
  // Groups by purpose: tp per (pp, dp, cp), cp per (pp, dp, tp), dp over the dp*cp ranks of a
  // (pp, tp) position.
  std::map<plan::CommPurpose, std::set<std::vector<int>>> groups;
  for (const auto& g : prog.groups)
    if (g.ranks.size() < 16) groups[g.purpose].insert(g.ranks);
  std::set<std::vector<int>> tp, cp, dpcp;
  for (int pp = 0; pp < 2; ++pp)
    for (int x = 0; x < 2; ++x)
      for (int y = 0; y < 2; ++y) {
        tp.insert({prog.rank_of(x, 0, pp, y), prog.rank_of(x, 1, pp, y)});  // x = dp, y = cp
        cp.insert({prog.rank_of(x, y, pp, 0), prog.rank_of(x, y, pp, 1)});  // x = dp, y = tp
      }
  for (int pp = 0; pp < 2; ++pp)
    for (int t = 0; t < 2; ++t)
      dpcp.insert({prog.rank_of(0, t, pp, 0), prog.rank_of(0, t, pp, 1), prog.rank_of(1, t, pp, 0), prog.rank_of(1, t, pp, 1)});
  CHECK(groups[plan::CommPurpose::tp] == tp);
  CHECK(groups[plan::CommPurpose::cp] == cp);
  std::set<std::vector<int>> dp_sized;
  for (const auto& g : groups[plan::CommPurpose::dp])
    if (g.size() == 4) dp_sized.insert(g);
  CHECK(dp_sized == dpcp);
  // Every rank's cp collectives run on the cp group holding it, its ZeRO reduce-scatters and
  // gathers on its dp*cp group.
  for (const auto& rp : prog.ranks)
    for (const auto& t : rp.tasks) {
      if (t.kind != plan::TaskKind::collective) continue;
      const auto& members = prog.groups[static_cast<size_t>(t.group)].ranks;
      CHECK(std::find(members.begin(), members.end(), rp.rank) != members.end());
      if (t.purpose == plan::CommPurpose::cp) CHECK(cp.count(members) == 1);
      if (t.purpose == plan::CommPurpose::zero_grad || t.purpose == plan::CommPurpose::zero_param) CHECK(dpcp.count(members) == 1);
    }
}

TEST_CASE("lower: each attention all-gathers K, V over cp before its forward and backward and reduce-scatters dK, dV: 2 s kv d b / tp each", "[plan][lower]") {
  // Llama 3 8B has grouped-query attention (8 kv heads of 128): the gathered K, V of a layer
  // and micro-batch are 2 s 8 128 b bytes-per-element / tp.
  for (int tp : {1, 2})
    for (auto rc : {plan::Recompute::none, plan::Recompute::full})
      for (auto gran : {plan::Granularity::op, plan::Granularity::layer}) {
        PlanSpec s;
        s.model = "llama3-8b";
        s.cp = 4;
        s.tp = tp;
        s.sp = tp > 1;
        s.pp = 2;
        s.recompute = rc;
        s.micro_batch = 2;
        s.micro_batches = 3;
        s.attention = plan::AttentionImpl::flash;
        INFO(testing::describe(s) << (gran == plan::Granularity::op ? " op" : " layer"));
        auto r = testing::resolve_plan(s);
        const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
        REQUIRE(plan::check_program(prog) == "");
        const double S = kv_bytes(r->ctx, s);
        const int layers = attention_layers(r->ctx);
        for (const auto& rp : prog.ranks) {
          std::map<std::string, std::pair<int, double>> got;  // "phase/kind" -> (count, bytes)
          for (const auto& t : rp.tasks) {
            if (t.purpose != plan::CommPurpose::cp) continue;
            REQUIRE(t.kind == plan::TaskKind::collective);
            CHECK(prog.streams[static_cast<size_t>(t.stream)] == "cp");
            CHECK(r->ctx.graph.ops()[static_cast<size_t>(t.op)].kind == models::OpKind::attention);
            CHECK(t.bytes == Approx(S));
            auto& e = got[std::string(plan::phase_name(t.phase)) + "/" + std::string(plan::collective_kind_name(t.collective))];
            ++e.first;
            e.second += t.bytes;
          }
          // Layers of this pipeline rank (pp 2 splits the 32 blocks evenly).
          const int mine = layers / s.pp;
          const int n = mine * static_cast<int>(s.micro_batches);
          std::map<std::string, std::pair<int, double>> want = {{"forward/all_gather", {n, n * S}},
                                                               {"backward/all_gather", {n, n * S}},
                                                               {"backward/reduce_scatter", {n, n * S}}};
          if (rc == plan::Recompute::full) want["recompute/all_gather"] = {n, n * S};
          CHECK(got == want);
        }
      }
}

TEST_CASE("lower: the forward K, V gather follows the QKV projection, the backward one is issued when the layer's backward starts", "[plan][lower]") {
  PlanSpec s;
  s.model = "llama3-8b";
  s.cp = 2;
  s.pp = 2;
  s.micro_batches = 2;
  s.attention = plan::AttentionImpl::flash;
  for (auto gran : {plan::Granularity::op, plan::Granularity::layer}) {
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
    const auto& graph = r->ctx.graph;
    const auto& rp = prog.ranks[static_cast<size_t>(prog.rank_of(0, 0, 1, 1))];
    auto holds = [&](const plan::Task& t, models::OpKind kind) {
      if (t.kind != plan::TaskKind::compute) return false;
      const std::vector<int> ops = t.ops.empty() ? std::vector<int>{t.op} : t.ops;
      return std::any_of(ops.begin(), ops.end(), [&](int id) { return id >= 0 && graph.ops()[static_cast<size_t>(id)].kind == kind; });
    };
    int checked = 0;
    for (const auto& t : rp.tasks) {
      if (t.purpose != plan::CommPurpose::cp) continue;
      // The first compute task after it that holds the attention (the forward, or the backward).
      const plan::Task* user = nullptr;
      for (size_t i = static_cast<size_t>(t.id) + 1; i < rp.tasks.size() && !user; ++i)
        if (holds(rp.tasks[i], models::OpKind::attention) && rp.tasks[i].unit == t.unit && rp.tasks[i].micro_batch == t.micro_batch)
          user = &rp.tasks[i];
      const plan::Task& before = rp.tasks[static_cast<size_t>(t.deps.front())];
      if (t.phase == plan::Phase::forward) {
        // After the QKV projection of the same layer; the attention waits for it.
        REQUIRE(before.kind == plan::TaskKind::compute);
        CHECK(before.unit == t.unit);
        CHECK(holds(before, models::OpKind::linear));
        REQUIRE(user != nullptr);
        CHECK(std::find(user->deps.begin(), user->deps.end(), t.id) != user->deps.end());
        ++checked;
      } else if (t.collective == plan::CollectiveKind::all_gather) {
        // After the previous compute only, before the backward of the layer's MLP (which does
        // not wait for it); the attention backward does.
        REQUIRE(user != nullptr);
        CHECK(user->phase == plan::Phase::backward);
        CHECK(std::find(user->deps.begin(), user->deps.end(), t.id) != user->deps.end());
        const plan::Task* next = nullptr;
        for (size_t i = static_cast<size_t>(t.id) + 1; i < rp.tasks.size() && !next; ++i)
          if (rp.tasks[i].kind == plan::TaskKind::compute) next = &rp.tasks[i];
        REQUIRE(next != nullptr);
        CHECK(next->unit == t.unit);  // the backward of the layer's MLP and output projection runs meanwhile
        CHECK(next->phase == plan::Phase::backward);
        CHECK_FALSE(holds(*next, models::OpKind::attention));
        CHECK(std::find(next->deps.begin(), next->deps.end(), t.id) == next->deps.end());
        ++checked;
      } else {
        // The reduce-scatter of dK, dV follows the attention backward; the QKV backward waits for it.
        CHECK(holds(before, models::OpKind::attention));
        const plan::Task* next = nullptr;
        for (size_t i = static_cast<size_t>(t.id) + 1; i < rp.tasks.size() && !next; ++i)
          if (rp.tasks[i].kind == plan::TaskKind::compute) next = &rp.tasks[i];
        REQUIRE(next != nullptr);
        CHECK(std::find(next->deps.begin(), next->deps.end(), t.id) != next->deps.end());
        ++checked;
      }
    }
    CHECK(checked == 3 * 16 * 2);  // 16 layers on the last stage, 2 micro-batches
  }
}

TEST_CASE("lower: with cp each op runs on s/cp tokens and attention on 1/cp of the s x s work, and the step's FLOPs do not change", "[plan][lower]") {
  for (auto attention : {plan::AttentionImpl::flash, plan::AttentionImpl::unfused})
    for (auto rc : {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}) {
      PlanSpec s;
      s.model = "llama2-7b";
      s.seq_len = 128;
      s.dp = 2;
      s.attention = attention;
      s.recompute = rc;
      auto one = testing::resolve_plan(s);
      s.cp = 4;
      INFO(testing::describe(s) << " " << plan::attention_impl_name(attention));
      auto four = testing::resolve_plan(s);
      const auto p1 = plan::lower(one->plan, one->ctx, {.memory_events = false});
      const auto p4 = plan::lower(four->plan, four->ctx, {.memory_events = false});
      auto all = [](const plan::Task&) { return true; };
      auto attn = [](const plan::Task& t) { return t.op_kind == static_cast<int>(models::OpKind::attention); };
      CHECK(step_flops(p4, all) == Approx(step_flops(p1, all)).epsilon(1e-12));
      CHECK(step_flops(p4, attn) == Approx(step_flops(p1, attn)).epsilon(1e-12));
      // Per rank: a quarter of every op's work; the attention's GEMM is s/cp queries x s keys.
      for (size_t i = 0; i < one->ctx.graph.ops().size(); ++i) {
        const auto& op = one->ctx.graph.ops()[i];
        CHECK(p4.op_costs[i].flops_fwd == Approx(p1.op_costs[i].flops_fwd / 4).margin(1e-9));
        CHECK(p4.op_costs[i].flops_bwd == Approx(p1.op_costs[i].flops_bwd / 4).margin(1e-9));
        CHECK(p4.op_costs[i].saved_bytes == Approx(p1.op_costs[i].saved_bytes / 4).margin(1e-9));
        if (op.kind == models::OpKind::attention) {
          CHECK(p4.op_costs[i].gemm_m == p1.op_costs[i].gemm_m / 4);
          CHECK(p4.op_costs[i].gemm_n == 128);
          CHECK(p4.op_costs[i].cp_kv_bytes == Approx(2.0 * 128 * 32 * 128 * 2));  // 2 s kv d elem, b = 1
          CHECK(p1.op_costs[i].cp_kv_bytes == 0);
        } else if (op.is_matmul()) {
          CHECK(p4.op_costs[i].gemm_m == p1.op_costs[i].gemm_m / 4);
        }
      }
      // With unfused attention the executed FLOPs are the model graph's: the model's training
      // FLOPs x global batch over all ranks.
      if (attention == plan::AttentionImpl::unfused) {
        double rec = 0;
        for (const auto& op : four->ctx.graph.ops())
          if ((rc == plan::Recompute::full && four->ctx.graph.units()[static_cast<size_t>(op.unit)].name.rfind("block", 0) == 0) ||
              (rc == plan::Recompute::selective && op.dropped_by_selective_recompute))
            rec += op.flops_fwd * static_cast<double>(four->plan.global_batch);
        CHECK(step_flops(p4, all) ==
              Approx(four->ctx.graph.training_flops_per_sample() * static_cast<double>(four->plan.global_batch) + rec).epsilon(1e-9));
      }
    }
}

TEST_CASE("lower: with cp pipeline transfers carry s/cp tokens between the same (dp, cp, tp) ranks of neighbouring stages", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.pp = 4;
  s.cp = 2;
  s.tp = 2;
  s.sp = true;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx);
  const double act = static_cast<double>(s.seq_len * 768 * 2);  // s h bytes, one sample
  int transfers = 0;
  for (const auto& rp : prog.ranks)
    for (const auto& t : rp.tasks) {
      if (t.kind != plan::TaskKind::send && t.kind != plan::TaskKind::recv) continue;
      ++transfers;
      CHECK(t.bytes == Approx(act / s.tp / s.cp));
      const auto& peer = prog.ranks[static_cast<size_t>(t.peer)];
      CHECK((peer.dp_rank == rp.dp_rank && peer.cp_rank == rp.cp_rank && peer.tp_rank == rp.tp_rank));
      CHECK(std::abs(peer.pp_rank - rp.pp_rank) == 1);
    }
  CHECK(transfers == 2 * 2 * 2 * 3 * 2 * static_cast<int>(s.micro_batches));  // tp x cp x (send + recv) x boundaries x directions x m
}

TEST_CASE("plan memory: with cp a rank keeps 1/cp of the activations, plus the K, V gathered for the layer being computed", "[plan]") {
  // Stage 0 of a 1F1B pipeline ends with a block and holds 2 micro-batches at its peak, reached
  // when the newest one's backward starts: its last layer gathers K, V again (S bytes, far less
  // than what the layer keeps, so that is the highest point): 2 K / cp + S, with 2 K the cp = 1
  // peak. Weights, gradients and optimizer state: ZeRO shards over dp * cp.
  for (auto attention : {plan::AttentionImpl::flash, plan::AttentionImpl::unfused})
    for (int tp : {1, 2}) {
      PlanSpec s;
      s.model = "llama3-8b";
      s.seq_len = 256;
      s.pp = 2;
      s.tp = tp;
      s.micro_batches = 4;
      s.zero = 1;
      s.attention = attention;
      auto one = testing::resolve_plan(s);
      s.cp = 2;
      auto two = testing::resolve_plan(s);
      INFO(testing::describe(s) << " " << plan::attention_impl_name(attention));
      const auto m1 = plan::stage_memory(one->plan, one->ctx, 0);
      const auto m2 = plan::stage_memory(two->plan, two->ctx, 0);
      const double S = kv_bytes(two->ctx, s);
      CHECK(m1.micro_batches_in_flight == 2);
      CHECK(m2.activations_bytes == Approx(m1.activations_bytes / 2 + S).epsilon(1e-12));
      CHECK(m2.params_on_rank == m1.params_on_rank);
      CHECK(m2.optimizer_bytes == Approx(m1.params_on_rank * 12.0 / 2));  // ZeRO-1 over dp * cp = 2
      CHECK(m1.optimizer_bytes == Approx(m1.params_on_rank * 12.0));
      // The last stage holds the fp32 logits of s/cp tokens.
      const auto l1 = plan::stage_memory(one->plan, one->ctx, 1);
      const auto l2 = plan::stage_memory(two->plan, two->ctx, 1);
      const double cublas = one->ctx.gpu->cublas_workspace_bytes;
      CHECK(l2.workspace_bytes - cublas == Approx((l1.workspace_bytes - cublas) / 2));
    }
}

TEST_CASE("lower: with cp the replayed activation peak equals the memory model for every recomputation and schedule", "[plan][lower]") {
  for (auto schedule : {plan::Schedule::gpipe, plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b})
    for (auto rc : {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full})
      for (auto attention : {plan::AttentionImpl::flash, plan::AttentionImpl::unfused}) {
        PlanSpec s;
        s.model = "gpt3-1.3b";
        s.seq_len = 512;  // long enough for the unfused scores to matter under selective recomputation
        s.cp = 2;
        s.tp = 2;
        s.sp = rc != plan::Recompute::none;
        s.pp = 2;
        s.vp = schedule == plan::Schedule::interleaved_1f1b ? 2 : 1;
        s.schedule = schedule;
        s.recompute = rc;
        s.micro_batches = 4;
        s.attention = attention;
        auto r = testing::resolve_plan(s);
        for (auto gran : {plan::Granularity::op, plan::Granularity::layer}) {
          const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
          REQUIRE(plan::check_program(prog) == "");
          for (const auto& rp : prog.ranks) {
            INFO(testing::describe(s) << " " << plan::attention_impl_name(attention) << " rank " << rp.rank
                                      << (gran == plan::Granularity::op ? " op" : " layer"));
            const double peak = testing::activation_peak(rp);
            CHECK(peak == Approx(plan::activation_peak_bytes(r->plan, r->ctx, rp.pp_rank)).epsilon(1e-12));
            CHECK(peak == Approx(plan::stage_memory(r->plan, r->ctx, rp.pp_rank).activations_bytes).epsilon(1e-12));
          }
        }
      }
}

TEST_CASE("lower: the cp ranks of a replica run the same tasks, and representatives-only lowering gives them to one rank per (pp, tp)", "[plan][lower]") {
  PlanSpec s;
  s.model = "llama2-7b";
  s.dp = 2;
  s.cp = 4;
  s.tp = 2;
  s.pp = 2;
  s.zero = 1;
  s.sp = true;
  auto r = testing::resolve_plan(s);
  const auto full = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer, .memory_events = false});
  const auto reps = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer, .memory_events = false,
                                                  .representatives_only = true});
  REQUIRE(plan::check_program(reps) == "");
  int with_tasks = 0;
  for (const auto& rp : full.ranks) {
    const int rep = full.symmetry_class[static_cast<size_t>(rp.rank)];
    CHECK(rep == full.rank_of(0, rp.tp_rank, rp.pp_rank, 0));
    const auto& mine = rp.tasks;
    const auto& theirs = full.ranks[static_cast<size_t>(rep)].tasks;
    REQUIRE(mine.size() == theirs.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      CHECK(mine[i].flops == theirs[i].flops);
      CHECK(mine[i].bytes == theirs[i].bytes);
      CHECK(mine[i].kind == theirs[i].kind);
    }
    with_tasks += reps.ranks[static_cast<size_t>(rp.rank)].tasks.empty() ? 0 : 1;
  }
  CHECK(with_tasks == s.tp * s.pp);
}
