// Test helpers for the simulator: a builder of hand-made StepPrograms, a fake GPU whose
// compute times are exact, and pipeline-schedule programs (GPipe, 1F1B, interleaved 1F1B).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/simulate.hpp"

namespace trainplan::testing {

/// Peak of the fake GPU: a compute task of `s * kTestPeakFlops` FLOPs takes s seconds under
/// exact_options().
inline constexpr double kTestPeakFlops = 1e12;
inline constexpr double kTestHbmBytesPerS = 2e12;

inline hw::GpuSpec test_gpu() {
  hw::GpuSpec g;
  g.name = "TestGPU";
  g.arch = "test";
  g.memory_bytes = 80e9;
  g.memory_bandwidth_bytes_per_s = kTestHbmBytesPerS;
  g.peak_flops = {{Precision::bf16, kTestPeakFlops}, {Precision::fp32, kTestPeakFlops / 8}};
  g.sm_count = 108;
  g.cublas_workspace_bytes = 32.0 * 1048576.0;
  return g;
}

/// Options under which compute time = FLOPs / peak and communication pays no launch cost.
inline sim::SimOptions exact_options() {
  sim::SimOptions o;
  o.compute.gemm_efficiency = 1;
  o.compute.gemm_shape_effects = false;
  o.compute.kernel_overhead_s = 0;
  o.comm_launch_s = 0;
  return o;
}

enum Stream { kCompute = 0, kComm = 1, kPpSend = 2, kPpRecv = 3 };

class ProgramBuilder {
 public:
  /// `world` ranks on GPUs 0..world-1 (or `gpus` if given), streams compute/comm/pp-send/pp-recv.
  explicit ProgramBuilder(int world, std::vector<int> gpus = {}) {
    p_.world_size = world;
    p_.streams = {"compute", "comm", "pp-send", "pp-recv"};
    for (int r = 0; r < world; ++r) {
      plan::RankProgram rp;
      rp.rank = r;
      rp.gpu = gpus.empty() ? r : gpus[static_cast<size_t>(r)];
      p_.ranks.push_back(rp);
    }
  }

  plan::StepProgram& program() { return p_; }
  plan::RankProgram& rank(int r) { return p_.ranks[static_cast<size_t>(r)]; }

  int group(std::vector<int> ranks, plan::CommPurpose purpose) {
    plan::Group g;
    g.id = static_cast<int>(p_.groups.size());
    g.purpose = purpose;
    g.ranks = std::move(ranks);
    p_.groups.push_back(g);
    return g.id;
  }

  /// Appends a task to a rank (id and rank filled in); returns its id.
  int add(int r, plan::Task t) {
    auto& tasks = rank(r).tasks;
    t.id = static_cast<int>(tasks.size());
    tasks.push_back(std::move(t));
    return static_cast<int>(tasks.size()) - 1;
  }

  /// A matmul-like compute task of `seconds` under exact_options().
  int compute(int r, double seconds, std::vector<int> deps = {}, plan::Phase phase = plan::Phase::forward,
              std::string label = "compute") {
    plan::Task t;
    t.kind = plan::TaskKind::compute;
    t.stream = kCompute;
    t.deps = std::move(deps);
    t.phase = phase;
    t.flops = seconds * kTestPeakFlops;
    t.op_kind = static_cast<int>(models::OpKind::linear);
    t.label = std::move(label);
    return add(r, std::move(t));
  }

  int send(int r, int peer, double bytes, int64_t comm_id, std::vector<int> deps = {},
           plan::CommPurpose purpose = plan::CommPurpose::pp, int stream = kPpSend) {
    return p2p(plan::TaskKind::send, r, peer, bytes, comm_id, std::move(deps), purpose, stream);
  }
  int recv(int r, int peer, double bytes, int64_t comm_id, std::vector<int> deps = {},
           plan::CommPurpose purpose = plan::CommPurpose::pp, int stream = kPpRecv) {
    return p2p(plan::TaskKind::recv, r, peer, bytes, comm_id, std::move(deps), purpose, stream);
  }

  /// One collective task on every member of `group`; deps[i] for the i-th member (optional).
  /// Returns the task id per member, in group order.
  std::vector<int> collective(int group, plan::CollectiveKind kind, double bytes,
                              std::vector<std::vector<int>> deps = {}, int stream = kComm,
                              plan::CommPurpose purpose = plan::CommPurpose::none) {
    const plan::Group& g = p_.groups[static_cast<size_t>(group)];
    const int64_t id = next_comm_id_++;
    std::vector<int> ids;
    for (size_t i = 0; i < g.ranks.size(); ++i) {
      plan::Task t;
      t.kind = plan::TaskKind::collective;
      t.stream = stream;
      t.collective = kind;
      t.group = group;
      t.bytes = bytes;
      t.purpose = purpose == plan::CommPurpose::none ? g.purpose : purpose;
      t.comm_id = id;
      t.label = std::string(plan::collective_kind_name(kind));
      if (i < deps.size()) t.deps = deps[i];
      ids.push_back(add(g.ranks[i], std::move(t)));
    }
    return ids;
  }

  /// One member's task of a collective whose comm_id the caller chooses (for programs built
  /// rank by rank).
  int member(int r, int group, plan::CollectiveKind kind, double bytes, int64_t comm_id, std::vector<int> deps = {},
             int stream = kComm) {
    plan::Task t;
    t.kind = plan::TaskKind::collective;
    t.stream = stream;
    t.collective = kind;
    t.group = group;
    t.bytes = bytes;
    t.purpose = p_.groups[static_cast<size_t>(group)].purpose;
    t.comm_id = comm_id;
    t.deps = std::move(deps);
    t.label = std::string(plan::collective_kind_name(kind)) + " " + std::string(plan::comm_purpose_name(t.purpose));
    return add(r, std::move(t));
  }

  int alloc(int r, double bytes, int64_t buffer_id, std::vector<int> deps = {}) {
    return memory(plan::TaskKind::alloc, r, bytes, buffer_id, std::move(deps));
  }
  int release(int r, double bytes, int64_t buffer_id, std::vector<int> deps = {}) {
    return memory(plan::TaskKind::free, r, bytes, buffer_id, std::move(deps));
  }

  /// A comm_id no other task uses (for hand-paired send/recv).
  int64_t fresh_comm_id() { return next_comm_id_++; }

 private:
  int p2p(plan::TaskKind kind, int r, int peer, double bytes, int64_t comm_id, std::vector<int> deps,
          plan::CommPurpose purpose, int stream) {
    plan::Task t;
    t.kind = kind;
    t.stream = stream;
    t.peer = peer;
    t.bytes = bytes;
    t.comm_id = comm_id;
    t.purpose = purpose;
    t.deps = std::move(deps);
    t.label = kind == plan::TaskKind::send ? "send" : "recv";
    return add(r, std::move(t));
  }
  int memory(plan::TaskKind kind, int r, double bytes, int64_t buffer_id, std::vector<int> deps) {
    plan::Task t;
    t.kind = kind;
    t.stream = kCompute;
    t.alloc_bytes = bytes;
    t.buffer_id = buffer_id;
    t.buffer = plan::BufferKind::activations;
    t.deps = std::move(deps);
    t.label = kind == plan::TaskKind::alloc ? "alloc" : "free";
    return add(r, std::move(t));
  }

  plan::StepProgram p_;
  int64_t next_comm_id_ = 1'000'000;  // hand-paired ids stay below
};

struct PipelineSpec {
  int stages = 2;            // p
  int micro_batches = 4;     // m
  int chunks = 1;            // v (interleaved 1F1B only)
  double forward_s = 1e-3;   // per micro-batch, whole stage (all its chunks)
  double backward_s = 2e-3;
  plan::Schedule schedule = plan::Schedule::one_f_one_b;
  double activation_bytes = 0;   // p2p bytes per boundary
  double saved_bytes = 0;        // activations allocated at forward, freed after backward
};

/// Compute order of pipeline rank `r`: plan::pipeline_order (Megatron-LM's GPipe, 1F1B and
/// interleaved 1F1B orders).
inline std::vector<plan::PipelineStep> pipeline_order(const PipelineSpec& s, int r) {
  return plan::pipeline_order(s.schedule, s.stages, s.schedule == plan::Schedule::interleaved_1f1b ? s.chunks : 1,
                              s.micro_batches, r);
}

/// A pipeline-parallel program: rank r = stage r on GPU r; virtual stage c*p + r is chunk c of
/// rank r. Activations go forward and gradients backward by send/recv (purpose pp); recvs sit
/// on the pp-recv stream without deps (posted early), sends on pp-send after their compute.
inline plan::StepProgram build_pipeline(const PipelineSpec& s) {
  const int p = s.stages, v = s.chunks, last_vs = p * v - 1;
  ProgramBuilder b(p);
  auto comm_id = [&](bool forward, int mb, int vs_from) {
    return (static_cast<int64_t>(mb) * (last_vs + 1) + vs_from) * 2 + (forward ? 0 : 1);
  };
  for (int r = 0; r < p; ++r) {
    std::vector<std::vector<int>> fwd_task(static_cast<size_t>(s.micro_batches), std::vector<int>(static_cast<size_t>(v), -1));
    for (const plan::PipelineStep& op : pipeline_order(s, r)) {
      const int vs = op.chunk * p + r;
      const std::string where = "mb" + std::to_string(op.micro_batch) + " vs" + std::to_string(vs);
      std::vector<int> deps;
      if (op.phase == plan::Phase::forward) {
        if (vs > 0) deps.push_back(b.recv(r, (vs - 1) % p, s.activation_bytes, comm_id(true, op.micro_batch, vs - 1)));
        if (s.saved_bytes > 0) b.alloc(r, s.saved_bytes, op.micro_batch * (last_vs + 1) + vs);
        int f = b.compute(r, s.forward_s / v, deps, plan::Phase::forward, "fwd " + where);
        fwd_task[static_cast<size_t>(op.micro_batch)][static_cast<size_t>(op.chunk)] = f;
        if (vs < last_vs) b.send(r, (vs + 1) % p, s.activation_bytes, comm_id(true, op.micro_batch, vs), {f});
      } else {
        deps.push_back(fwd_task[static_cast<size_t>(op.micro_batch)][static_cast<size_t>(op.chunk)]);
        if (vs < last_vs) deps.push_back(b.recv(r, (vs + 1) % p, s.activation_bytes, comm_id(false, op.micro_batch, vs + 1)));
        int bk = b.compute(r, s.backward_s / v, deps, plan::Phase::backward, "bwd " + where);
        if (s.saved_bytes > 0) b.release(r, s.saved_bytes, op.micro_batch * (last_vs + 1) + vs, {bk});
        if (vs > 0) b.send(r, (vs - 1) % p, s.activation_bytes, comm_id(false, op.micro_batch, vs), {bk});
      }
    }
  }
  plan::StepProgram prog = b.program();
  prog.pp = p;
  prog.vp = v;
  prog.num_micro_batches = s.micro_batches;
  for (auto& rp : prog.ranks) rp.pp_rank = rp.rank;
  return prog;
}

}  // namespace trainplan::testing

namespace trainplan::testing {

struct HybridSpec {
  int dp = 2, tp = 2, pp = 2;
  int micro_batches = 4;
  int layers = 1;             // per stage; each a compute half, a tp all-reduce, a compute half
  double forward_s = 1e-3;    // per micro-batch per stage (all its layers)
  double backward_s = 2e-3;
  double tp_bytes = 8e6;      // per tp all-reduce
  double pp_bytes = 16e6;     // per boundary transfer
  double grad_bytes = 2e8;    // dp all-reduce of the stage's gradients
  double optimizer_s = 5e-4;
  double saved_bytes = 1e8;
  /// A 4-byte all-reduce over every rank before the optimizer (a global gradient norm).
  bool world_all_reduce = false;
  /// Build tasks only for dp_rank 0 (LowerOptions::representatives_only).
  bool representatives_only = false;
};

/// A dp x tp x pp program with 1F1B (rank = (pp_rank*dp + dp_rank)*tp + tp_rank on GPU = rank):
/// per micro-batch and direction two compute halves around a tp all-reduce, pp send/recv
/// between stages (same dp and tp rank), then a dp all-reduce of the gradients and the
/// optimizer step. symmetry_class = (pp_rank, tp_rank).
inline plan::StepProgram build_hybrid(const HybridSpec& h) {
  const int world = h.dp * h.tp * h.pp;
  ProgramBuilder b(world);
  plan::StepProgram& prog = b.program();
  prog.dp = h.dp, prog.tp = h.tp, prog.pp = h.pp;
  prog.num_micro_batches = h.micro_batches;
  std::vector<int> tp_group(static_cast<size_t>(h.dp * h.pp)), dp_group(static_cast<size_t>(h.tp * h.pp));
  for (int s = 0; s < h.pp; ++s)
    for (int d = 0; d < h.dp; ++d) {
      std::vector<int> ranks;
      for (int t = 0; t < h.tp; ++t) ranks.push_back(prog.rank_of(d, t, s));
      tp_group[static_cast<size_t>(s * h.dp + d)] = b.group(ranks, plan::CommPurpose::tp);
    }
  for (int s = 0; s < h.pp; ++s)
    for (int t = 0; t < h.tp; ++t) {
      std::vector<int> ranks;
      for (int d = 0; d < h.dp; ++d) ranks.push_back(prog.rank_of(d, t, s));
      dp_group[static_cast<size_t>(s * h.tp + t)] = b.group(ranks, plan::CommPurpose::dp);
    }
  std::vector<int> everyone(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) everyone[static_cast<size_t>(r)] = r;
  const int world_group = b.group(everyone, plan::CommPurpose::dp);
  PipelineSpec ps;
  ps.stages = h.pp;
  ps.micro_batches = h.micro_batches;
  // comm ids: [kind][stage or group][mb][direction]
  // The first tp comm_id of a micro-batch and direction; its layers use the next ones.
  auto tp_id = [&](int group, int mb, bool fwd) {
    return ((static_cast<int64_t>(group) * h.micro_batches + mb) * 2 + (fwd ? 0 : 1)) * h.layers;
  };
  // `layers` x (compute half, tp all-reduce, compute half) after `deps`; returns the last task.
  auto layer_chain = [&](ProgramBuilder& pb, int r, int tg, const std::vector<int>& deps, double total_s,
                         int64_t first_id, plan::Phase phase, const std::string& label) {
    std::vector<int> prev = deps;
    int last_task = -1;
    for (int l = 0; l < h.layers; ++l) {
      const double half = total_s / h.layers / 2;
      const int c1 = pb.compute(r, half, prev, phase, label + " a" + std::to_string(l));
      const int ar = h.tp > 1 ? pb.member(r, tg, plan::CollectiveKind::all_reduce, h.tp_bytes, first_id + l, {c1}) : c1;
      last_task = pb.compute(r, half, {ar}, phase, label + " b" + std::to_string(l));
      prev = {last_task};
    }
    return last_task;
  };
  // Dense comm ids: tp first, then pp, then dp.
  const int64_t pp_base = static_cast<int64_t>(h.dp) * h.pp * h.micro_batches * 2 * h.layers;
  const int64_t dp_base = pp_base + static_cast<int64_t>(h.dp) * h.tp * h.pp * h.micro_batches * 2;
  auto pp_id = [&](int d, int t, int boundary, int mb, bool fwd) {
    return pp_base + ((((static_cast<int64_t>(d) * h.tp + t) * h.pp + boundary) * h.micro_batches + mb) * 2 + (fwd ? 0 : 1));
  };
  for (int s = 0; s < h.pp; ++s)
    for (int d = 0; d < h.dp; ++d)
      for (int t = 0; t < h.tp; ++t) {
        const int r = prog.rank_of(d, t, s);
        plan::RankProgram& rp = b.rank(r);
        rp.dp_rank = d, rp.tp_rank = t, rp.pp_rank = s;
        rp.static_bytes = 1e9;
        if (h.representatives_only && d != 0) continue;
        const int tg = tp_group[static_cast<size_t>(s * h.dp + d)];
        std::vector<int> fwd_of(static_cast<size_t>(h.micro_batches), -1);
        int last = -1;
        for (const plan::PipelineStep& op : pipeline_order(ps, s)) {
          std::vector<int> deps;
          const int mb = op.micro_batch;
          const std::string where = " mb" + std::to_string(mb);
          if (op.phase == plan::Phase::forward) {
            if (s > 0) deps.push_back(b.recv(r, prog.rank_of(d, t, s - 1), h.pp_bytes, pp_id(d, t, s - 1, mb, true)));
            b.alloc(r, h.saved_bytes, mb);
            const int c2 = layer_chain(b, r, tg, deps, h.forward_s, tp_id(tg, mb, true), plan::Phase::forward, "fwd" + where);
            fwd_of[static_cast<size_t>(mb)] = c2;
            if (s + 1 < h.pp) b.send(r, prog.rank_of(d, t, s + 1), h.pp_bytes, pp_id(d, t, s, mb, true), {c2});
          } else {
            deps.push_back(fwd_of[static_cast<size_t>(mb)]);
            if (s + 1 < h.pp) deps.push_back(b.recv(r, prog.rank_of(d, t, s + 1), h.pp_bytes, pp_id(d, t, s, mb, false)));
            const int c2 = layer_chain(b, r, tg, deps, h.backward_s, tp_id(tg, mb, false), plan::Phase::backward, "bwd" + where);
            b.release(r, h.saved_bytes, mb, {c2});
            if (s > 0) b.send(r, prog.rank_of(d, t, s - 1), h.pp_bytes, pp_id(d, t, s - 1, mb, false), {c2});
            last = c2;
          }
        }
        int grads = last;
        if (h.dp > 1) {
          const int dg = dp_group[static_cast<size_t>(s * h.tp + t)];
          grads = b.member(r, dg, plan::CollectiveKind::all_reduce, h.grad_bytes, dp_base + dg, {last}, kComm);
        }
        if (h.world_all_reduce)
          grads = b.member(r, world_group, plan::CollectiveKind::all_reduce, 4, dp_base + h.tp * h.pp, {grads}, kComm);
        b.compute(r, h.optimizer_s, {grads}, plan::Phase::optimizer, "optimizer");
      }
  prog.symmetry_class.resize(static_cast<size_t>(world));
  for (const auto& rp : prog.ranks) prog.symmetry_class[static_cast<size_t>(rp.rank)] = prog.rank_of(0, rp.tp_rank, rp.pp_rank);
  return std::move(prog);  // prog refers into the builder
}

/// The program as LowerOptions::representatives_only lowers it: ranks outside their class's
/// representative (dp_rank 0) keep their header and lose their tasks.
inline plan::StepProgram representatives_only(plan::StepProgram prog) {
  for (auto& rp : prog.ranks)
    if (prog.symmetry_class[static_cast<size_t>(rp.rank)] != rp.rank) rp.tasks.clear();
  return prog;
}

}  // namespace trainplan::testing
