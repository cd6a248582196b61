// plan::lower(): the program's invariants on a grid of plans, and its FLOPs and
// communication volumes against closed forms from the model graph and the plan.
#include <algorithm>
#include <map>
#include <set>

#include "test_lower_fixture.hpp"

using namespace trainplan;
using testing::PlanSpec;

namespace {

bool splits(models::TpSplit s) {
  return s == models::TpSplit::column || s == models::TpSplit::row || s == models::TpSplit::heads || s == models::TpSplit::vocab;
}

// Ranks that compute an op in full per sample, over the tp ranks of one replica: a split op is
// shared out (1), a replicated op runs on every tp rank (tp) unless sequence parallelism
// shards it (1).
double replication(const models::Op& op, int tp, bool sp) {
  if (splits(op.tp_split) || (sp && op.tp_split == models::TpSplit::replicated)) return 1;
  return tp;
}

// Training FLOPs of one step over all ranks, with the recomputed forwards: full recomputation
// re-runs the layers ("block*" units), never the embedding or the head (output layer, loss).
double expected_step_flops(const plan::Plan& p, const plan::PlanContext& ctx, double* recomputed) {
  const double gb = static_cast<double>(p.global_batch);
  double total = 0, rec = 0;
  for (const auto& op : ctx.graph.ops()) {
    const double k = replication(op, p.tp, p.sequence_parallel) * gb;
    total += (op.flops_fwd + op.flops_bwd) * k;
    const bool layer = ctx.graph.units()[static_cast<size_t>(op.unit)].name.rfind("block", 0) == 0;
    if ((p.recompute == plan::Recompute::full && layer) ||
        (p.recompute == plan::Recompute::selective && op.dropped_by_selective_recompute))
      rec += op.flops_fwd * k;
  }
  *recomputed = rec;
  return total + rec;
}

// The data-parallel group: every (dp, cp) rank holding the same parameters.
int dp_group_of(const plan::StepProgram& prog, int rank) {
  const auto& rp = prog.ranks[static_cast<size_t>(rank)];
  std::vector<int> want;
  for (int d = 0; d < prog.dp; ++d)
    for (int c = 0; c < prog.cp; ++c) want.push_back(prog.rank_of(d, rp.tp_rank, rp.pp_rank, c));
  for (const auto& g : prog.groups)
    if (g.purpose == plan::CommPurpose::dp && g.ranks == want) return g.id;
  return -1;
}

double gradient_bytes(const plan::Plan& p, const plan::PlanContext& ctx, int stage) {
  return plan::stage_memory(p, ctx, stage).params_on_rank * bytes_per_element(p.precision_or(ctx.precision));
}

// Sum of `bytes` of a rank's collectives of one kind and purpose on its dp group.
double dp_bytes(const plan::StepProgram& prog, int rank, plan::CollectiveKind kind, plan::CommPurpose purpose) {
  const int group = dp_group_of(prog, rank);
  double sum = 0;
  for (const auto& t : prog.ranks[static_cast<size_t>(rank)].tasks)
    if (t.kind == plan::TaskKind::collective && t.collective == kind && t.purpose == purpose && t.group == group) sum += t.bytes;
  return sum;
}

}  // namespace

TEST_CASE("lower: check_program passes on the grid of models, layouts, ZeRO stages, schedules and recomputation", "[plan][lower]") {
  std::set<std::string> seen;
  for (const PlanSpec& s : testing::plan_grid()) {
    INFO(testing::describe(s));
    auto r = testing::resolve_plan(s);
    const auto gran = seen.size() % 2 ? plan::Granularity::layer : plan::Granularity::op;
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
    REQUIRE(plan::check_program(prog) == "");
    REQUIRE(prog.ranks.size() == static_cast<size_t>(s.dp * s.tp * s.pp * s.cp));
    seen.insert("zero" + std::to_string(s.zero));
    seen.insert(std::string(plan::schedule_name(s.schedule)));
    seen.insert(std::string(plan::dp_algorithm_name(s.algorithm)));
    seen.insert(std::string(plan::recompute_name(s.recompute)));
    seen.insert(s.sp ? "sp" : "no-sp");
    seen.insert("cp" + std::to_string(s.cp));
  }
  for (const char* v : {"zero0", "zero1", "zero2", "zero3", "gpipe", "1f1b", "interleaved-1f1b", "ring", "tree", "hierarchical",
                        "parameter-server", "none", "selective", "full", "sp", "no-sp", "cp1", "cp2"})
    CHECK(seen.count(v) == 1);
}

TEST_CASE("lower: compute FLOPs over all ranks are the model's training FLOPs x global batch + the recomputed forwards", "[plan][lower]") {
  for (const PlanSpec& s : testing::plan_grid()) {
    INFO(testing::describe(s));
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer, .memory_events = false});
    double recomputed = 0;
    const double expected = expected_step_flops(r->plan, r->ctx, &recomputed);
    double flops = 0, rec = 0;
    for (const auto& rp : prog.ranks)
      for (const auto& t : rp.tasks) {
        if (t.kind != plan::TaskKind::compute || t.phase == plan::Phase::optimizer) continue;
        flops += t.flops;
        if (t.phase == plan::Phase::recompute) rec += t.flops;
      }
    CHECK(flops == Approx(expected).epsilon(1e-9));
    CHECK(rec == Approx(recomputed).epsilon(1e-9).margin(1e-3));
    // Without replicated ops (tp = 1, or sequence parallelism) that is exactly the model's
    // training FLOPs per sample x global batch.
    if (s.tp == 1 || s.sp)
      CHECK(flops - rec == Approx(r->ctx.graph.training_flops_per_sample() * static_cast<double>(r->plan.global_batch)).epsilon(1e-9));
  }
}

TEST_CASE("lower: every model family lowers to a valid program with the model's FLOPs", "[plan][lower]") {
  struct Case {
    const char* model;
    int dp, tp, pp;
  };
  for (Case c : {Case{"gpt-tiny", 2, 2, 2}, Case{"llama-tiny", 1, 2, 2}, Case{"bert-tiny", 2, 2, 2}, Case{"vit-tiny", 2, 2, 2},
                 Case{"resnet-tiny", 2, 1, 2}, Case{"mlp-tiny", 2, 1, 2}})
    for (auto rc : {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full})
      for (int zero : {0, 1}) {
        PlanSpec s;
        s.model = c.model;
        s.dp = c.dp, s.tp = c.tp, s.pp = c.pp;
        s.sp = c.tp > 1 && zero == 1;
        s.recompute = rc;
        s.zero = zero;
        s.seq_len = 0;
        s.micro_batch = 2;
        s.bucket_size_bytes = 1e3;
        INFO(testing::describe(s));
        auto r = testing::resolve_plan(s);
        for (auto gran : {plan::Granularity::op, plan::Granularity::layer}) {
          const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
          REQUIRE(plan::check_program(prog) == "");
          double recomputed = 0;
          const double expected = expected_step_flops(r->plan, r->ctx, &recomputed);
          double flops = 0;
          for (const auto& rp : prog.ranks)
            for (const auto& t : rp.tasks)
              if (t.kind == plan::TaskKind::compute && t.phase != plan::Phase::optimizer) flops += t.flops;
          CHECK(flops == Approx(expected).epsilon(1e-9));
          for (const auto& rp : prog.ranks)
            CHECK(testing::activation_peak(rp) == Approx(plan::activation_peak_bytes(r->plan, r->ctx, rp.pp_rank)).epsilon(1e-12));
        }
      }
}

TEST_CASE("lower: every send has one recv with equal bytes, every collective one task per member with equal size", "[plan][lower]") {
  // Independent of check_program: match by comm_id here.
  for (const PlanSpec& s : testing::plan_grid()) {
    if (s.dp * s.tp * s.pp * s.cp < 4) continue;
    INFO(testing::describe(s));
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    struct Seen {
      std::vector<std::pair<int, const plan::Task*>> tasks;
    };
    std::map<int64_t, Seen> by_id;
    for (const auto& rp : prog.ranks)
      for (const auto& t : rp.tasks)
        if (t.kind == plan::TaskKind::send || t.kind == plan::TaskKind::recv || t.kind == plan::TaskKind::collective)
          by_id[t.comm_id].tasks.push_back({rp.rank, &t});
    size_t p2p = 0, collectives = 0;
    for (const auto& [id, seen] : by_id) {
      const plan::Task& first = *seen.tasks.front().second;
      if (first.kind == plan::TaskKind::collective) {
        ++collectives;
        const auto& members = prog.groups[static_cast<size_t>(first.group)].ranks;
        REQUIRE(seen.tasks.size() == members.size());
        std::set<int> ranks;
        for (const auto& [rank, t] : seen.tasks) {
          ranks.insert(rank);
          CHECK(t->bytes == first.bytes);
          CHECK(t->collective == first.collective);
          CHECK(t->group == first.group);
        }
        CHECK(ranks == std::set<int>(members.begin(), members.end()));
      } else {
        ++p2p;
        REQUIRE(seen.tasks.size() == 2);
        const auto& [ra, a] = seen.tasks[0];
        const auto& [rb, b] = seen.tasks[1];
        CHECK(a->kind != b->kind);
        CHECK(a->peer == rb);
        CHECK(b->peer == ra);
        CHECK(a->bytes == b->bytes);
      }
    }
    if (s.pp > 1) CHECK(p2p == static_cast<size_t>(s.dp * s.tp * s.cp) * (s.pp * s.vp - 1) * 2 * s.micro_batches);
    if (s.dp * s.tp * s.pp * s.cp > 1) CHECK(collectives > 0);
  }
}

TEST_CASE("lower: data-parallel all-reduce buckets add up to the gradient bytes of the rank's parameters", "[plan][lower]") {
  for (const PlanSpec& s : testing::plan_grid()) {
    if (s.dp * s.cp < 2 || s.zero != 0 || s.algorithm == plan::DpAlgorithm::parameter_server) continue;
    INFO(testing::describe(s));
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    for (const auto& rp : prog.ranks)
      CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::all_reduce, plan::CommPurpose::dp) ==
            Approx(gradient_bytes(r->plan, r->ctx, rp.pp_rank)).epsilon(1e-12));
  }
}

TEST_CASE("lower: buckets hold at least bucket_size_bytes, in reverse op order, after the last micro-batch's backward", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt3-1.3b";
  s.dp = 2;
  s.pp = 2;
  s.tp = 2;
  s.micro_batches = 4;
  s.bucket_size_bytes = 20e6;
  s.schedule = plan::Schedule::interleaved_1f1b;
  s.vp = 2;
  auto r = testing::resolve_plan(s);
  const double elem = 2;
  for (auto gran : {plan::Granularity::op, plan::Granularity::layer}) {
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = gran});
    for (const auto& rp : prog.ranks) {
      INFO("rank " << rp.rank);
      const int group = dp_group_of(prog, rp.rank);
      int last_op = 1 << 30;
      int buckets = 0;
      for (const auto& t : rp.tasks) {
        if (t.kind != plan::TaskKind::collective || t.group != group || t.purpose != plan::CommPurpose::dp) continue;
        ++buckets;
        // Which task's end starts the chain: the backward of the bucket's last op, last micro-batch.
        const plan::Task* trigger = &rp.tasks[static_cast<size_t>(t.deps.front())];
        while (trigger->kind != plan::TaskKind::compute) trigger = &rp.tasks[static_cast<size_t>(trigger->deps.front())];
        const bool tied = t.ops.size() == 1 && (t.ops[0] == 0 || r->ctx.graph.ops()[static_cast<size_t>(t.ops[0])].tied_weight_op >= 0);
        if (!tied) {
          CHECK(trigger->phase == plan::Phase::backward);
          CHECK(trigger->micro_batch == s.micro_batches - 1);
          const auto& ops = gran == plan::Granularity::op ? std::vector<int>{trigger->op} : trigger->ops;
          CHECK(std::find(ops.begin(), ops.end(), t.ops.back()) != ops.end());
          // Reverse op order across buckets, and the bucket closes only once full.
          CHECK(t.ops.front() < last_op);
          for (size_t i = 1; i < t.ops.size(); ++i) CHECK(t.ops[i] < t.ops[i - 1]);
          last_op = t.ops.back();
          double without_last = t.bytes;
          const auto& op = r->ctx.graph.ops()[static_cast<size_t>(t.ops.back())];
          without_last -= (splits(op.tp_split) ? op.params / s.tp : op.params) * elem;
          CHECK(without_last < s.bucket_size_bytes);
        }
      }
      CHECK(buckets >= 3);
    }
  }
  // Without overlap every bucket waits for the whole backward.
  s.overlap = false;
  auto r2 = testing::resolve_plan(s);
  const auto prog = plan::lower(r2->plan, r2->ctx, {.granularity = plan::Granularity::layer});
  for (const auto& rp : prog.ranks) {
    int last_backward = -1, first_bucket = -1;
    for (const auto& t : rp.tasks) {
      if (t.kind == plan::TaskKind::compute && t.phase == plan::Phase::backward) last_backward = t.id;
      if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::dp && first_bucket < 0) first_bucket = t.id;
    }
    CHECK(first_bucket > last_backward);
  }
}

TEST_CASE("lower: ZeRO-1 reduce-scatters the gradients once, ZeRO-2 once per micro-batch, and both all-gather the updated parameters once",
          "[plan][lower]") {
  for (int zero : {1, 2}) {
    PlanSpec s;
    s.model = "gpt2-124m";
    s.dp = 4;
    s.tp = 2;
    s.zero = zero;
    s.micro_batches = 3;
    s.bucket_size_bytes = 4e6;
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    for (const auto& rp : prog.ranks) {
      const double grads = gradient_bytes(r->plan, r->ctx, rp.pp_rank);
      // ZeRO-2 keeps 1/dp of the gradients: each micro-batch's are reduced as they are made.
      const double reductions = zero == 2 ? 3.0 : 1.0;
      CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad) == Approx(reductions * grads));
      CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) == Approx(grads));
      CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::all_reduce, plan::CommPurpose::dp) == 0);
      // The gathers follow the optimizer step.
      int optimizer = -1;
      for (const auto& t : rp.tasks) {
        if (t.phase == plan::Phase::optimizer) optimizer = t.id;
        if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_param) CHECK(optimizer >= 0);
        if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_grad) CHECK(optimizer < 0);
      }
    }
  }
}

TEST_CASE("lower: gradient reductions move 4 bytes per gradient where the stack reduces bf16 training's gradients in fp32",
          "[plan][lower]") {
  // Megatron-LM forces fp32 gradient all-reduces under --bf16 (arguments.py); Composer's FSDP
  // mixed precision DEFAULT reduce-scatters in fp32; Megatron-core / NeMo's performance recipes
  // reduce in bf16 (grad_reduce_in_fp32 = False). Oracle: parameters on the rank x 4 or x 2.
  struct Case { const char* software; int zero; plan::CollectiveKind kind; plan::CommPurpose purpose; double bytes_per_grad; };
  for (Case c : {Case{"megatron-lm", 0, plan::CollectiveKind::all_reduce, plan::CommPurpose::dp, 4.0},
                 Case{"megatron-core", 0, plan::CollectiveKind::all_reduce, plan::CommPurpose::dp, 2.0},
                 Case{"megatron-lm", 1, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad, 4.0},
                 Case{"pytorch-fsdp", 3, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad, 4.0},
                 Case{"deepspeed", 3, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad, 2.0}}) {
    PlanSpec s;
    s.model = "llama2-7b";
    s.dp = 4;
    s.micro_batches = 1;
    s.zero = c.zero;
    s.precision = Precision::bf16;
    s.software = c.software;
    INFO(c.software << " zero " << c.zero);
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    const double psi = plan::stage_memory(r->plan, r->ctx, 0).params_on_rank;
    CHECK(dp_bytes(prog, 0, c.kind, c.purpose) == Approx(psi * c.bytes_per_grad));
    if (c.zero == 3)  // the parameter gathers stay 16-bit: the unit in use, forward and backward
      CHECK(dp_bytes(prog, 0, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) == Approx(2 * psi * 2.0));
    // A plan's data_parallel.grad_reduce overrides the stack: bf16 on the wire again.
    r->plan.grad_reduce = Precision::bf16;
    const auto narrow = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    CHECK(dp_bytes(narrow, 0, c.kind, c.purpose) == Approx(psi * 2.0));
  }
}

TEST_CASE("lower: ZeRO-3 moves 1.5x the bytes of plain data parallelism (gather forward + gather backward + reduce-scatter)", "[plan][lower]") {
  PlanSpec s;
  s.model = "llama2-7b";  // untied embeddings: every parameter is gathered once per pass
  s.dp = 4;
  s.micro_batches = 1;
  auto plain = testing::resolve_plan(s);
  s.zero = 3;
  auto z3 = testing::resolve_plan(s);
  const auto p0 = plan::lower(plain->plan, plain->ctx);
  const auto p3 = plan::lower(z3->plan, z3->ctx);
  const double n = s.dp;
  for (int rank = 0; rank < s.dp; ++rank) {
    const double grads = gradient_bytes(z3->plan, z3->ctx, 0);
    // Ring traffic per rank: all-reduce 2(n-1)/n S, all-gather and reduce-scatter (n-1)/n S.
    const double plain_traffic = 2 * (n - 1) / n * dp_bytes(p0, rank, plan::CollectiveKind::all_reduce, plan::CommPurpose::dp);
    const double ag = dp_bytes(p3, rank, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param);
    const double rs = dp_bytes(p3, rank, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad);
    CHECK(ag == Approx(2 * grads));
    CHECK(rs == Approx(grads));
    CHECK((n - 1) / n * (ag + rs) == Approx(1.5 * plain_traffic));
  }
  // Parameters are gathered again for every micro-batch.
  s.micro_batches = 3;
  auto z3m = testing::resolve_plan(s);
  const auto p3m = plan::lower(z3m->plan, z3m->ctx);
  CHECK(dp_bytes(p3m, 0, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) ==
        Approx(2 * 3 * gradient_bytes(z3m->plan, z3m->ctx, 0)));
  // ... and, its gradients kept as 1/dp shards, reduce-scattered after every micro-batch.
  CHECK(dp_bytes(p3m, 0, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad) ==
        Approx(3 * gradient_bytes(z3m->plan, z3m->ctx, 0)));
}

TEST_CASE("lower: ZeRO-3 reduce-scatters each unit's gradients after that unit's backward in every micro-batch, on the gathers' stream",
          "[plan][lower]") {
  for (bool overlap : {true, false}) {
    PlanSpec s;
    s.model = "gpt2-124m";
    s.dp = 4;
    s.tp = 2;
    s.sp = true;
    s.zero = 3;
    s.micro_batches = 3;
    auto r = testing::resolve_plan(s);
    r->plan.overlap_grad_reduce = overlap;
    const auto prog = plan::lower(r->plan, r->ctx);
    REQUIRE(plan::check_program(prog).empty());
    // One NCCL stream per process group: the gathers and the reduce-scatters share "dp".
    CHECK(std::find(prog.streams.begin(), prog.streams.end(), "zero-gather") == prog.streams.end());
    const int units = static_cast<int>(r->ctx.graph.units().size());
    for (const auto& rp : prog.ranks) {
      std::map<int, int> last_backward;  // (micro-batch * units + unit) -> the last backward compute
      std::map<int, int> reduced;        // (micro-batch * units + unit) -> its reduce-scatter
      int dp_stream = -1;
      for (const auto& t : rp.tasks) {
        const int key = t.micro_batch * units + t.unit;
        if (t.kind == plan::TaskKind::compute && t.phase == plan::Phase::backward && t.unit >= 0) last_backward[key] = t.id;
        if (t.kind != plan::TaskKind::collective || (t.purpose != plan::CommPurpose::zero_grad && t.purpose != plan::CommPurpose::zero_param))
          continue;
        if (dp_stream < 0) dp_stream = t.stream;
        CHECK(t.stream == dp_stream);
        CHECK(prog.streams[static_cast<size_t>(t.stream)] == "dp");
        if (t.purpose != plan::CommPurpose::zero_grad) continue;
        CHECK(reduced.count(key) == 0);
        reduced[key] = t.id;
        // It comes after that micro-batch's backward of the unit (its gradients exist then).
        REQUIRE(last_backward.count(key) == 1);
        CHECK(t.id > last_backward[key]);
      }
      // Every unit with parameters, in every micro-batch: the micro-batches' reductions are not
      // deferred to the last one.
      std::set<int> mbs;
      for (const auto& [key, id] : reduced) mbs.insert(key / units);
      CHECK(mbs == std::set<int>{0, 1, 2});
      CHECK(reduced.size() % 3 == 0);
    }
  }
}

TEST_CASE("lower: FSDP casts and pre-divides each unit's unsharded gradient before its reduce-scatter (grad_epilogue)", "[plan][lower]") {
  // PyTorch FSDP's post-backward hook: bf16 gradients cast to the fp32 reduce precision (read 2,
  // write 4 bytes per parameter) and divided in place by the predivide factor (read and write 4),
  // one memory-bound task on the compute stream before each unit's reduce-scatter, every
  // micro-batch; none on one rank (nothing is reduced) or on a stack without the pass.
  for (const char* stack : {"pytorch-fsdp", "deepspeed"})
    for (int dp : {1, 4}) {
      PlanSpec s;
      s.model = "gpt2-124m";
      s.dp = dp;
      s.zero = 3;
      s.micro_batches = 3;
      s.precision = Precision::bf16;
      s.software = stack;
      auto r = testing::resolve_plan(s);
      const auto prog = plan::lower(r->plan, r->ctx);
      REQUIRE(plan::check_program(prog).empty());
      const bool fsdp = std::string(stack) == "pytorch-fsdp";
      CHECK(r->ctx.software.grad_epilogue == fsdp);
      double unit_params[64] = {};
      for (const auto& op : r->ctx.graph.ops()) unit_params[op.unit] += op.params;
      const auto& rp = prog.ranks[0];
      int epilogues = 0, reductions = 0;
      for (const auto& t : rp.tasks) {
        if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_grad) {
          ++reductions;
          if (!fsdp) continue;
          // Its only dependency is the epilogue of the same unit and micro-batch.
          REQUIRE(t.deps.size() == 1);
          const plan::Task& e = rp.tasks[static_cast<size_t>(t.deps[0])];
          CHECK(e.kind == plan::TaskKind::compute);
          CHECK(e.unit == t.unit);
          CHECK(e.micro_batch == t.micro_batch);
          CHECK(e.stream == 0);  // the compute stream: the next compute waits for it
          CHECK(e.mem_bytes == Approx(unit_params[t.unit] * (2.0 + 4.0 + 2 * 4.0)));
          CHECK(e.flops == 0);
        }
        if (t.label.rfind("grad epilogue", 0) == 0) ++epilogues;
      }
      INFO(stack << ", dp " << dp);
      CHECK(epilogues == (fsdp && dp > 1 ? reductions : 0));
      if (dp > 1) CHECK(reductions > 0);
    }
}

TEST_CASE("lower: with ZeRO-3 a tied LM head gathers the word embedding it reads", "[plan][lower]") {
  // GPT-2 ties the head to the embedding of unit 0, which is gathered and freed long before
  // the head runs: the head's visit gathers it again (forward and backward).
  PlanSpec s;
  s.model = "gpt2-124m";
  s.dp = 4;
  s.micro_batches = 1;
  s.zero = 3;
  auto z3 = testing::resolve_plan(s);
  const auto p3 = plan::lower(z3->plan, z3->ctx);
  const auto& spec = z3->ctx.model_spec;
  const double embedding = static_cast<double>(spec.vocab) * static_cast<double>(spec.hidden) * 2.0;  // bf16
  const double grads = gradient_bytes(z3->plan, z3->ctx, 0);
  CHECK(dp_bytes(p3, 0, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) == Approx(2 * (grads + embedding)));
  const int head = static_cast<int>(z3->ctx.graph.units().size()) - 1;
  bool found = false;
  for (const auto& t : p3.ranks[0].tasks)
    if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_param && t.unit == head) {
      found = true;
      const int tied = z3->ctx.graph.op_named("head.lm").tied_weight_op;
      CHECK(tied >= 0);
      CHECK(std::find(t.ops.begin(), t.ops.end(), tied) != t.ops.end());
    }
  CHECK(found);
}

TEST_CASE("lower: ZeRO-3 gathers each unit one visit ahead and holds at most two gathered units", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.dp = 2;
  s.zero = 3;
  s.micro_batches = 2;
  s.recompute = plan::Recompute::full;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx);
  REQUIRE(plan::check_program(prog) == "");
  const auto& rp = prog.ranks[1];
  // Gathers in visit order: (unit, phase, mb); each precedes the first compute of its visit and
  // follows the compute of the visit two before it.
  std::vector<const plan::Task*> gathers;
  double live = 0, peak = 0, max_unit = 0;
  for (const auto& t : rp.tasks) {
    if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_param) gathers.push_back(&t);
    if (t.buffer == plan::BufferKind::params && t.kind == plan::TaskKind::alloc) live += t.alloc_bytes, max_unit = std::max(max_unit, t.alloc_bytes);
    if (t.buffer == plan::BufferKind::params && t.kind == plan::TaskKind::free) live -= t.alloc_bytes;
    peak = std::max(peak, live);
  }
  const size_t units = r->ctx.graph.units().size();
  REQUIRE(gathers.size() == 2 * units * 2);
  CHECK(peak == Approx(2 * max_unit));
  // The first compute task of each visit waits for its gather.
  std::vector<const plan::Task*> users;
  for (const plan::Task* g : gathers) {
    const plan::Task* user = nullptr;
    for (const auto& t : rp.tasks)
      if (t.kind == plan::TaskKind::compute && t.unit == g->unit && t.micro_batch == g->micro_batch &&
          (t.phase == plan::Phase::forward) == (g->phase == plan::Phase::forward) && t.id > g->id) {
        user = &t;
        break;
      }
    REQUIRE(user != nullptr);
    CHECK(std::find(user->deps.begin(), user->deps.end(), g->id) != user->deps.end());
    users.push_back(user);
  }
  for (size_t i = 1; i < gathers.size(); ++i) {
    // Issued when the previous visit starts (after the one before it has computed), once the
    // previous gather is done.
    CHECK(gathers[i]->id < users[i - 1]->id);
    if (i >= 2) CHECK(gathers[i]->id > users[i - 2]->id);
    CHECK(std::find(gathers[i]->deps.begin(), gathers[i]->deps.end(), gathers[i - 1]->id) != gathers[i]->deps.end());
  }
}

TEST_CASE("lower: DeepSpeed's ZeRO-3 gathers a recomputed layer again for its backward, FSDP's recomputes inside the backward's gather",
          "[plan][lower]") {
  PlanSpec s;
  s.model = "llama2-7b";  // untied embeddings
  s.dp = 2;
  s.zero = 3;
  s.micro_batches = 2;
  for (plan::Recompute rc : {plan::Recompute::none, plan::Recompute::full}) {
    s.recompute = rc;
    s.software = "pytorch-fsdp";
    auto fsdp = testing::resolve_plan(s);
    s.software = "deepspeed";
    auto ds = testing::resolve_plan(s);
    REQUIRE_FALSE(fsdp->ctx.software.zero3_recompute_gathers);
    REQUIRE(ds->ctx.software.zero3_recompute_gathers);
    const auto pf = plan::lower(fsdp->plan, fsdp->ctx);
    const auto pd = plan::lower(ds->plan, ds->ctx);
    REQUIRE(plan::check_program(pd) == "");
    const double params = gradient_bytes(ds->plan, ds->ctx, 0);
    double layers = 0;  // the recomputed units' parameters ("block*"), bf16
    for (const auto& op : ds->ctx.graph.ops())
      if (ds->ctx.graph.units()[static_cast<size_t>(op.unit)].name.rfind("block", 0) == 0) layers += op.params * 2.0;
    const double m = static_cast<double>(s.micro_batches);
    INFO((rc == plan::Recompute::full ? "full" : "no") << " recomputation");
    CHECK(dp_bytes(pf, 0, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) == Approx(2 * m * params));
    CHECK(dp_bytes(pd, 0, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) ==
          Approx(2 * m * params + (rc == plan::Recompute::full ? m * layers : 0.0)));
    int recompute_gathers = 0;
    for (const auto& t : pd.ranks[0].tasks)
      if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_param && t.phase == plan::Phase::recompute)
        ++recompute_gathers;
    CHECK(recompute_gathers == (rc == plan::Recompute::full ? static_cast<int>(ds->ctx.model_spec.layers * s.micro_batches) : 0));
  }
}

TEST_CASE("lower: a stack with zero3_tensor_sync gathers each parameter tensor alone, after all earlier work (DeepSpeed v0.3)", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.dp = 2;
  s.zero = 3;
  s.micro_batches = 2;
  s.recompute = plan::Recompute::full;
  s.software = "deepspeed-2021";
  auto r = testing::resolve_plan(s);
  REQUIRE(r->ctx.software.zero3_tensor_sync);
  const hw::SoftwareStack& sw = r->ctx.software;
  // DeepSpeed#1069's 130 us pre-launch + 250 us launch, on 8 ranks: fixed + 8 views and copies.
  CHECK(sw.zero3_tensor_issue_s + 8 * (sw.zero3_rank_view_s + sw.zero3_rank_copy_s) == Approx(380e-6));
  REQUIRE(sw.zero3_rank_view_s > 0);
  REQUIRE(sw.zero3_rank_copy_s > 0);
  const auto prog = plan::lower(r->plan, r->ctx);
  REQUIRE(plan::check_program(prog) == "");
  // Oracle: every op's weight and bias (or beta) is its own tensor, and the tied LM head
  // gathers the word embedding again; forward, recomputation (the layers, "block*" units:
  // DeepSpeed releases them after the recomputed forward) and backward, each micro-batch.
  double tensors = 1, layer_tensors = 0;  // the head's borrowed embedding
  double layer_bytes = 0;
  for (const auto& op : r->ctx.graph.ops()) {
    if (!(op.params > 0)) continue;
    tensors += op.has_bias ? 2 : 1;
    if (r->ctx.graph.units()[static_cast<size_t>(op.unit)].name.rfind("block", 0) == 0) {
      layer_tensors += op.has_bias ? 2 : 1;
      layer_bytes += op.params * 2.0;  // bf16
    }
  }
  REQUIRE(r->ctx.software.zero3_recompute_gathers);
  const auto& spec = r->ctx.model_spec;
  const double embedding = static_cast<double>(spec.vocab) * static_cast<double>(spec.hidden) * 2.0;  // bf16
  for (int rank = 0; rank < s.dp; ++rank) {
    const auto& rp = prog.ranks[static_cast<size_t>(rank)];
    std::vector<const plan::Task*> gathers;
    for (const auto& t : rp.tasks)
      if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_param) gathers.push_back(&t);
    REQUIRE(static_cast<double>(gathers.size()) == s.micro_batches * (2 * tensors + layer_tensors));
    CHECK(dp_bytes(prog, rank, plan::CollectiveKind::all_gather, plan::CommPurpose::zero_param) ==
          Approx(s.micro_batches * (2.0 * (gradient_bytes(r->plan, r->ctx, 0) + embedding) + layer_bytes)));
    int last_compute = -1;
    std::vector<int> reductions;  // reduce-scatters issued since the last visit began
    const plan::Task* prev = nullptr;
    for (const auto& t : rp.tasks) {
      if (t.kind == plan::TaskKind::compute) last_compute = t.id;
      if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_grad) reductions.push_back(t.id);
      if (t.kind != plan::TaskKind::collective || t.purpose != plan::CommPurpose::zero_param) continue;
      // Views before the call, one per rank of the dp group; the copies out alongside the transfer.
      CHECK(t.issue_s == Approx(sw.zero3_tensor_issue_s + s.dp * sw.zero3_rank_view_s));
      CHECK(t.issue_tail_s == Approx(s.dp * sw.zero3_rank_copy_s));
      const bool first_of_visit = prev == nullptr || prev->unit != t.unit || prev->phase != t.phase || prev->micro_batch != t.micro_batch;
      if (first_of_visit) {
        // The device sync: after the last compute and every reduce-scatter before it.
        if (last_compute >= 0) CHECK(std::find(t.deps.begin(), t.deps.end(), last_compute) != t.deps.end());
        // (each chain's last reduce-scatter: the ones before it are its dependencies, below)
        if (!reductions.empty()) CHECK(std::find(t.deps.begin(), t.deps.end(), reductions.back()) != t.deps.end());
        reductions.clear();
      } else {
        CHECK(t.deps == std::vector<int>{prev->id});  // one tensor after the other
        CHECK(last_compute < prev->id);               // no compute between a visit's gathers
      }
      prev = &t;
    }
    // The gradients: one reduce-scatter per parameter tensor of each unit, every micro-batch, in
    // op order; per unit the first carries the host's issue (views and copies, one per rank)
    // before it, each one but the last the next one's issue alongside.
    std::vector<const plan::Task*> reduces;
    for (const auto& t : rp.tasks)
      if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::zero_grad) reduces.push_back(&t);
    REQUIRE(static_cast<double>(reduces.size()) == s.micro_batches * (tensors - 1));  // the head borrows no gradient
    CHECK(dp_bytes(prog, rank, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::zero_grad) ==
          Approx(s.micro_batches * gradient_bytes(r->plan, r->ctx, 0)));
    const double issue = s.dp * (sw.zero3_rank_view_s + sw.zero3_rank_copy_s);
    for (size_t k = 0; k < reduces.size(); ++k) {
      const plan::Task& t = *reduces[k];
      const bool first = k == 0 || reduces[k - 1]->unit != t.unit || reduces[k - 1]->micro_batch != t.micro_batch;
      const bool last = k + 1 == reduces.size() || reduces[k + 1]->unit != t.unit || reduces[k + 1]->micro_batch != t.micro_batch;
      CHECK(t.ops.size() == 1);
      CHECK(t.issue_s == Approx(first ? issue : 0.0));
      CHECK(t.issue_tail_s == Approx(last ? 0.0 : issue));
      if (!first) CHECK(std::find(t.deps.begin(), t.deps.end(), reduces[k - 1]->id) != t.deps.end());
    }
    // One gathered unit live at a time, as the memory model counts it.
    double live = 0, peak = 0, max_unit = 0;
    for (const auto& t : rp.tasks) {
      if (t.buffer != plan::BufferKind::params) continue;
      if (t.kind == plan::TaskKind::alloc) live += t.alloc_bytes, max_unit = std::max(max_unit, t.alloc_bytes);
      if (t.kind == plan::TaskKind::free) live -= t.alloc_bytes;
      peak = std::max(peak, live);
    }
    CHECK(peak == Approx(max_unit));
  }
  const double comm = plan::stage_memory(r->plan, r->ctx, 0).comm_buffer_bytes;
  s.software = "deepspeed";
  auto prefetching = testing::resolve_plan(s);
  CHECK(plan::stage_memory(prefetching->plan, prefetching->ctx, 0).comm_buffer_bytes > comm);
}

TEST_CASE("lower: parameter server pushes (reduce-scatter) and pulls (all-gather) every gradient once, purpose ps", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.dp = 4;
  s.pp = 2;
  s.algorithm = plan::DpAlgorithm::parameter_server;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx);
  for (const auto& rp : prog.ranks) {
    const double grads = gradient_bytes(r->plan, r->ctx, rp.pp_rank);
    CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::reduce_scatter, plan::CommPurpose::ps) == Approx(grads));
    CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::all_gather, plan::CommPurpose::ps) == Approx(grads));
    CHECK(dp_bytes(prog, rp.rank, plan::CollectiveKind::all_reduce, plan::CommPurpose::dp) == 0);
  }
}

TEST_CASE("lower: tensor-parallel collectives of a GPT layer: 2+2 all-reduces, or 2 all-gathers + 2 reduce-scatters each way with SP", "[plan][lower]") {
  for (bool sp : {false, true})
    for (auto rc : {plan::Recompute::none, plan::Recompute::full}) {
      PlanSpec s;
      s.model = "gpt2-124m";
      s.tp = 4;
      s.sp = sp;
      s.recompute = rc;
      s.micro_batch = 2;
      s.micro_batches = 3;
      auto r = testing::resolve_plan(s);
      const auto prog = plan::lower(r->plan, r->ctx);
      const double act = static_cast<double>(s.seq_len * 768 * s.micro_batch * 2);  // s h b bytes
      const auto& block = r->ctx.graph.units()[5];
      std::map<std::string, std::pair<int, double>> got;  // "phase/kind" -> (count, bytes)
      for (const auto& t : prog.ranks[2].tasks)
        if (t.kind == plan::TaskKind::collective && t.unit == block.index) {
          CHECK(t.purpose == plan::CommPurpose::tp);
          CHECK(std::find(block.ops.begin(), block.ops.end(), t.op) != block.ops.end());
          auto& e = got[std::string(plan::phase_name(t.phase)) + "/" + std::string(plan::collective_kind_name(t.collective))];
          ++e.first;
          e.second += t.bytes;
        }
      const int m = static_cast<int>(s.micro_batches);
      std::map<std::string, std::pair<int, double>> want;
      if (!sp) {
        want["forward/all_reduce"] = {2 * m, 2 * m * act};
        want["backward/all_reduce"] = {2 * m, 2 * m * act};
        if (rc == plan::Recompute::full) want["recompute/all_reduce"] = {2 * m, 2 * m * act};
      } else {
        for (const char* ph : {"forward", "backward"}) {
          want[std::string(ph) + "/all_gather"] = {2 * m, 2 * m * act};
          want[std::string(ph) + "/reduce_scatter"] = {2 * m, 2 * m * act};
        }
        if (rc == plan::Recompute::full) {
          want["recompute/all_gather"] = {2 * m, 2 * m * act};
          want["recompute/reduce_scatter"] = {2 * m, 2 * m * act};
        }
      }
      CHECK(got == want);
    }
}

TEST_CASE("lower: pipeline transfers carry 1/tp of a unit's output between neighbours, gathered over tp without SP", "[plan][lower]") {
  for (bool sp : {false, true}) {
    PlanSpec s;
    s.model = "gpt2-124m";
    s.pp = 4;
    s.tp = 2;
    s.dp = 2;
    s.sp = sp;
    s.micro_batches = 4;
    s.schedule = plan::Schedule::interleaved_1f1b;
    s.vp = 2;
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx);
    const double act = static_cast<double>(s.seq_len * 768 * 2);
    for (const auto& rp : prog.ranks) {
      int sends = 0, recvs = 0, gathers = 0;
      for (const auto& t : rp.tasks) {
        if (t.purpose != plan::CommPurpose::pp) continue;
        if (t.kind == plan::TaskKind::send || t.kind == plan::TaskKind::recv) {
          (t.kind == plan::TaskKind::send ? sends : recvs)++;
          CHECK(t.bytes == Approx(act / s.tp));
          const auto& peer = prog.ranks[static_cast<size_t>(t.peer)];
          CHECK(peer.dp_rank == rp.dp_rank);
          CHECK(peer.tp_rank == rp.tp_rank);
          // Neighbours along virtual stages: p-1 talks to 0 between chunks.
          const int vs = t.virtual_stage * s.pp + rp.pp_rank;
          const bool towards_next = (t.kind == plan::TaskKind::send) == (t.phase == plan::Phase::forward);
          const int peer_vs = towards_next ? vs + 1 : vs - 1;
          CHECK(peer.pp_rank == peer_vs % s.pp);
        }
        if (t.kind == plan::TaskKind::collective) {
          ++gathers;
          CHECK(t.collective == plan::CollectiveKind::all_gather);
          CHECK(t.bytes == Approx(act));
          const auto& recv = rp.tasks[static_cast<size_t>(t.deps.front())];
          CHECK(recv.kind == plan::TaskKind::recv);
        }
      }
      // Virtual stages 1..7 receive activations, 0..6 gradients: each rank's 2 chunks.
      const int boundaries = (rp.pp_rank == 0 ? 1 : 2) + (rp.pp_rank == s.pp - 1 ? 1 : 2);
      CHECK(recvs == boundaries * s.micro_batches);
      CHECK(sends == boundaries * s.micro_batches);
      CHECK(gathers == (sp ? 0 : recvs));
    }
  }
}

TEST_CASE("lower: tied embeddings all-reduce their gradient between the first and the last stage", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.pp = 2;
  s.tp = 2;
  s.dp = 2;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx);
  const auto& graph = r->ctx.graph;
  const auto& head = graph.op_named("head.lm");
  const double bytes = 50257.0 * 768 / s.tp * 2;
  int found = 0;
  for (const auto& rp : prog.ranks)
    for (const auto& t : rp.tasks)
      if (t.kind == plan::TaskKind::collective && t.ops == std::vector<int>{head.tied_weight_op, head.id}) {
        ++found;
        CHECK(t.bytes == Approx(bytes));
        CHECK(t.role == plan::TensorRole::grads);
        const auto& g = prog.groups[static_cast<size_t>(t.group)];
        CHECK(g.ranks == std::vector<int>{prog.rank_of(rp.dp_rank, rp.tp_rank, 0), prog.rank_of(rp.dp_rank, rp.tp_rank, 1)});
      }
  CHECK(found == s.dp * s.tp * 2);
}

TEST_CASE("lower: the optimizer step runs on the rank's shard after a gradient-norm all-reduce over all ranks", "[plan][lower]") {
  for (int zero : {0, 1})
    for (auto prec : {Precision::bf16, Precision::fp32}) {
      PlanSpec s;
      s.model = "gpt2-124m";
      s.dp = 2;
      s.pp = 2;
      s.zero = zero;
      s.precision = prec;
      auto r = testing::resolve_plan(s);
      const auto prog = plan::lower(r->plan, r->ctx);
      for (const auto& rp : prog.ranks) {
        const auto* opt = &rp.tasks.front();
        for (const auto& t : rp.tasks)
          if (t.phase == plan::Phase::optimizer) opt = &t;
        REQUIRE(opt->phase == plan::Phase::optimizer);
        const double shard = plan::stage_memory(r->plan, r->ctx, rp.pp_rank).params_on_rank / (zero ? s.dp : 1);
        CHECK(opt->flops == Approx(10 * shard));
        CHECK(opt->mem_bytes == Approx((prec == Precision::fp32 ? 28 : 30) * shard));
        const auto& norm = rp.tasks[static_cast<size_t>(opt->deps.front())];
        CHECK(norm.kind == plan::TaskKind::collective);
        CHECK(norm.bytes == 4);
        CHECK(prog.groups[static_cast<size_t>(norm.group)].ranks.size() == static_cast<size_t>(prog.world_size));
      }
    }
}

TEST_CASE("lower: layer granularity gives the same FLOPs, bytes and activation peak as op granularity with fewer tasks", "[plan][lower]") {
  for (const PlanSpec& s : testing::plan_grid()) {
    if (s.model != "gpt2-124m") continue;
    INFO(testing::describe(s));
    auto r = testing::resolve_plan(s);
    const auto op = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::op});
    const auto layer = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    for (size_t rank = 0; rank < op.ranks.size(); ++rank) {
      plan::StepProgram a, b;
      a.ranks = {op.ranks[rank]};
      b.ranks = {layer.ranks[rank]};
      const auto ta = testing::totals(a), tb = testing::totals(b);
      CHECK(tb.flops == Approx(ta.flops).epsilon(1e-12));
      CHECK(tb.comm_bytes == ta.comm_bytes);
      CHECK(tb.compute_tasks < ta.compute_tasks);
      CHECK(tb.tasks < ta.tasks);
      CHECK(testing::activation_peak(layer.ranks[rank]) == Approx(testing::activation_peak(op.ranks[rank])).epsilon(1e-12));
    }
  }
}

TEST_CASE("lower: deterministic: the same plan gives byte-identical JSON, whatever the thread count", "[plan][lower]") {
  PlanSpec s;
  s.model = "llama2-7b";
  s.dp = 2;
  s.tp = 2;
  s.pp = 2;
  s.sp = true;
  s.zero = 1;
  s.recompute = plan::Recompute::selective;
  auto r = testing::resolve_plan(s);
  const std::string a = json::dump(plan::to_json(plan::lower(r->plan, r->ctx)));
  const std::string b = json::dump(plan::to_json(plan::lower(r->plan, r->ctx)));
  const std::string c = json::dump(plan::to_json(plan::lower(r->plan, r->ctx, {.threads = 2})));
  CHECK(a == b);
  CHECK(a == c);
  auto r2 = testing::resolve_plan(s);
  CHECK(json::dump(plan::to_json(plan::lower(r2->plan, r2->ctx))) == a);
}

TEST_CASE("lower: symmetry classes are the lowest rank of each (pp, tp) and their members run the same tasks", "[plan][lower]") {
  PlanSpec s;
  s.model = "gpt2-124m";
  s.dp = 4;
  s.tp = 2;
  s.pp = 2;
  s.zero = 1;
  s.sp = true;
  auto r = testing::resolve_plan(s);
  const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
  // What may differ between members: peers, groups, comm_ids.
  auto strip = [](const plan::RankProgram& rp) {
    json::Json out = json::Json::array();
    for (const auto& t : rp.tasks) {
      plan::Task c = t;
      c.peer = c.group = -1;
      c.comm_id = -1;
      plan::StepProgram one;
      plan::RankProgram holder;
      holder.tasks = {c};
      one.ranks = {holder};
      out.push_back(plan::to_json(one)["ranks"][0]["tasks"][0]);
    }
    return out;
  };
  for (const auto& rp : prog.ranks) {
    const int rep = prog.rank_of(0, rp.tp_rank, rp.pp_rank);
    CHECK(prog.symmetry_class[static_cast<size_t>(rp.rank)] == rep);
    if (rp.rank != rep) CHECK(strip(rp) == strip(prog.ranks[static_cast<size_t>(rep)]));
  }
  // Lowering only the representatives (or chosen ranks) gives them the same tasks.
  const auto reps = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer, .representatives_only = true});
  const auto some = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer, .only_ranks = {5}});
  CHECK(plan::check_program(reps) == "");
  for (const auto& rp : reps.ranks) {
    const bool rep = prog.symmetry_class[static_cast<size_t>(rp.rank)] == rp.rank;
    CHECK(rp.tasks.empty() == !rep);
    CHECK(rp.static_bytes == prog.ranks[static_cast<size_t>(rp.rank)].static_bytes);
    if (rep) {
      plan::StepProgram x, y;
      x.ranks = {rp};
      y.ranks = {prog.ranks[static_cast<size_t>(rp.rank)]};
      CHECK(json::dump(plan::to_json(x)) == json::dump(plan::to_json(y)));
    }
    CHECK(some.ranks[static_cast<size_t>(rp.rank)].tasks.empty() == (rp.rank != 5));
  }
  CHECK(some.ranks[5].tasks.size() == prog.ranks[5].tasks.size());
  REQUIRE_ERROR_CONTAINS(plan::lower(r->plan, r->ctx, {.only_ranks = {16}}), "names rank 16 but the plan has 16 ranks");
}

// How long this lowering takes is measured by BM_Simulator_Gpt3Lowering (benches/), not here.
TEST_CASE("lower: GPT-3 175B on 1024 GPUs (tp 8, pp 8, dp 16) lowers one program per class (64 representatives)", "[plan][lower]") {
  plan::Plan p;
  p.model = "gpt3-175b";
  p.instance_type = "p4d.24xlarge";
  p.instance_count = 128;
  p.dp = 16, p.tp = 8, p.pp = 8;
  p.micro_batch = 1;
  p.global_batch = 1536;
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  const auto prog = plan::lower(p, ctx, {.granularity = plan::Granularity::layer, .representatives_only = true});
  size_t reps = 0, tasks = 0, full = 0;
  for (const auto& rp : prog.ranks) {
    if (!rp.tasks.empty()) ++reps;
    tasks += rp.tasks.size();
    full += prog.ranks[static_cast<size_t>(prog.symmetry_class[static_cast<size_t>(rp.rank)])].tasks.size();
  }
  CHECK(reps == 64);
  CHECK(plan::check_program(prog) == "");
  // 96 micro-batches of 12-13 units on each stage; a block is 3 forward + 3 backward compute
  // tasks around its 2 + 2 tp all-reduces.
  const auto& mid = prog.ranks[static_cast<size_t>(prog.rank_of(0, 0, 3))];
  size_t compute = 0, tp = 0;
  for (const auto& t : mid.tasks) {
    compute += t.kind == plan::TaskKind::compute;
    tp += t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::tp;
  }
  CHECK(compute == 96 * 12 * 6 + 1);
  CHECK(tp == 96 * 12 * 4);
  INFO("GPT-3 175B, 1024 GPUs, layer granularity: " << tasks << " tasks on the 64 class representatives, " << full
                                                     << " for all ranks");
  CHECK(tasks < full / 8);  // the representatives hold a small part of the whole program
}

TEST_CASE("lower: flash attention executes half the causal score FLOPs forward and 2.5x that backward", "[plan][lower]") {
  // Per causal layer and sample: unfused QK^T + AV = 4 s^2 h forward, 8 s^2 h backward (plus
  // softmax work); flash skips the masked half and recomputes QK^T in backward:
  // 2 s^2 h forward, 5 s^2 h backward, and keeps no score matrix.
  PlanSpec s;
  s.model = "gpt2-124m";
  s.seq_len = 256;
  s.micro_batches = 2;
  auto sum_flops = [](const plan::StepProgram& p, plan::Phase phase) {
    double f = 0;
    for (const auto& r : p.ranks)
      for (const auto& t : r.tasks)
        if (t.kind == plan::TaskKind::compute && t.phase == phase && t.op_kind == static_cast<int>(models::OpKind::attention))
          f += t.flops;
    return f;
  };
  s.attention = plan::AttentionImpl::flash;
  auto rf = testing::resolve_plan(s);
  const auto flash = plan::lower(rf->plan, rf->ctx);
  const auto& spec = rf->ctx.model_spec;
  const double seq = 256, h = static_cast<double>(spec.hidden), layers = static_cast<double>(spec.layers);
  const double samples = static_cast<double>(rf->plan.global_batch);
  CHECK(sum_flops(flash, plan::Phase::forward) == Approx(2.0 * seq * seq * h * layers * samples));
  CHECK(sum_flops(flash, plan::Phase::backward) == Approx(5.0 * seq * seq * h * layers * samples));
  // No score matrix: the attention op saves only its fp32 log-sum-exp (4 bytes per head and token).
  for (const auto& op : rf->ctx.graph.ops())
    if (op.kind == models::OpKind::attention) {
      const auto c = plan::op_cost(op, 1, 1, false, Precision::bf16, plan::AttentionImpl::flash);
      CHECK(c.saved_bytes == Approx(4.0 * static_cast<double>(op.heads) * seq));
      CHECK_FALSE(c.recomputed_by_selective);
    }
  s.attention = plan::AttentionImpl::unfused;
  auto ru = testing::resolve_plan(s);
  const auto unfused = plan::lower(ru->plan, ru->ctx);
  CHECK(sum_flops(unfused, plan::Phase::forward) > 2.0 * sum_flops(flash, plan::Phase::forward));
}

TEST_CASE("lower: flash attention on a sliding-window layer computes s w - w^2/2 causal scores, not s^2/2", "[plan][lower]") {
  // One attention op of 4 heads of 16 over s = 64 tokens, window 16: the causal window holds
  // s w - w^2 / 2 = 896 of the 64 x 64 scores; flash runs QK^T + AV on them (4 d FLOPs per
  // score forward, 10 d backward). A window as long as the sequence is plain causal: s^2 / 2.
  models::Op op;
  op.kind = models::OpKind::attention;
  op.heads = op.kv_heads = 4;
  op.head_dim = 16;
  op.causal = true;
  op.out_shape = {64, 64};
  op.window = 16;
  const double scores = 64.0 * 16 - 16.0 * 16 / 2, hd = 4.0 * 16;
  const auto c = plan::op_cost(op, 1, 1, false, Precision::bf16, plan::AttentionImpl::flash);
  CHECK(c.flops_fwd == Approx(4.0 * scores * hd));
  CHECK(c.flops_bwd == Approx(10.0 * scores * hd));
  CHECK(c.gemm_n == 16);
  op.window = 64;
  CHECK(plan::op_cost(op, 1, 1, false, Precision::bf16, plan::AttentionImpl::flash).flops_fwd == Approx(4.0 * 64 * 64 / 2 * hd));
}

TEST_CASE("lower: Horovod's tensor fusion packs equal gradients into ceil(total / threshold) buffers of at most the threshold",
          "[plan][lower]") {
  // mlp-wide: nine 8192 x 8192 linear layers with biases, every gradient the same size P. A
  // threshold of m x P holds exactly m of them (horovod docs/tensor-fusion.rst: the first
  // tensors that fit), so the buffers number ceil(9 / m) = ceil(total / threshold).
  PlanSpec s;
  s.model = "mlp-wide";
  s.dp = 2;
  s.seq_len = 0;
  s.algorithm = plan::DpAlgorithm::horovod;
  const double P = (8192.0 * 8192 + 8192) * 2;  // bf16 gradient bytes of one layer
  for (int m : {1, 2, 3, 4, 9}) {
    s.bucket_size_bytes = m * P;
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::op});
    const double total = gradient_bytes(r->plan, r->ctx, 0);
    REQUIRE(total == Approx(9 * P));
    INFO("threshold = " << m << " layers");
    for (const auto& rp : prog.ranks) {
      const int group = dp_group_of(prog, rp.rank);
      int buffers = 0;
      for (const auto& t : rp.tasks)
        if (t.kind == plan::TaskKind::collective && t.group == group && t.purpose == plan::CommPurpose::dp) {
          ++buffers;
          CHECK(t.bytes <= s.bucket_size_bytes * (1 + 1e-12));
        }
      CHECK(buffers == static_cast<int>(std::ceil(total / s.bucket_size_bytes - 1e-9)));
    }
  }
  // PyTorch DDP's rule on the same model: a bucket closes once it holds at least the size, so a
  // threshold of 1.5 layers makes buckets of two (ceil(9 / 2) = 5), Horovod's of one (9).
  s.bucket_size_bytes = 1.5 * P;
  for (auto [algo, want] : {std::pair{plan::DpAlgorithm::ring, 5}, std::pair{plan::DpAlgorithm::horovod, 9}}) {
    s.algorithm = algo;
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::op});
    int buffers = 0;
    for (const auto& t : prog.ranks[0].tasks)
      if (t.kind == plan::TaskKind::collective && t.purpose == plan::CommPurpose::dp && t.group == dp_group_of(prog, 0)) ++buffers;
    CHECK(buffers == want);
  }
}
