// Plans for the lowering tests: a catalog model on `dp * tp * pp * cp` single-GPU instances, with
// short sequences so that programs stay small, and helpers that read programs back.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::testing {

struct PlanSpec {
  std::string model = "gpt2-124m";
  int dp = 1, tp = 1, pp = 1, vp = 1;
  int cp = 1;  // context parallel
  int zero = 0;
  bool sp = false;
  plan::Recompute recompute = plan::Recompute::none;
  plan::Schedule schedule = plan::Schedule::one_f_one_b;
  plan::DpAlgorithm algorithm = plan::DpAlgorithm::ring;
  int64_t micro_batch = 1;
  int64_t micro_batches = 4;
  int64_t seq_len = 64;
  double bucket_size_bytes = 25e6;
  bool overlap = true;
  std::optional<Precision> precision;
  std::string instance = "g5.xlarge";  // one GPU per instance
  /// Unfused by default: then the executed FLOPs and saved activations are the model graph's,
  /// which the closed-form oracles of these tests are written in.
  plan::AttentionImpl attention = plan::AttentionImpl::unfused;
  std::string software;  // the catalog's software stack (empty: the plan default)
};

struct Resolved {
  plan::Plan plan;
  plan::PlanContext ctx;
};

inline std::unique_ptr<Resolved> resolve_plan(const PlanSpec& s) {
  plan::Plan p;
  p.model = s.model;
  p.instance_type = s.instance;
  p.instance_count = s.dp * s.tp * s.pp * s.cp;
  p.dp = s.dp, p.tp = s.tp, p.pp = s.pp, p.vp = s.vp, p.cp = s.cp;
  p.zero_stage = s.zero;
  p.sequence_parallel = s.sp;
  p.recompute = s.recompute;
  p.schedule = s.schedule;
  p.dp_algorithm = s.algorithm;
  p.micro_batch = s.micro_batch;
  p.num_micro_batches = s.micro_batches;
  p.global_batch = s.micro_batch * s.micro_batches * s.dp;
  p.seq_len = s.seq_len;
  p.bucket_size_bytes = s.bucket_size_bytes;
  p.overlap_grad_reduce = s.overlap;
  p.precision = s.precision;
  p.attention = s.attention;
  if (!s.software.empty()) p.software = s.software;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  return std::make_unique<Resolved>(Resolved{std::move(p), std::move(ctx)});
}

/// The grid the structural oracles run on: three models (GPT-2 124M, GPT-3 1.3B, Llama 2 7B)
/// x tp {1,2,4} x pp {1,2,4} x dp {1,2}, two variants each, drawing schedule, ZeRO stage, dp
/// algorithm, sequence parallelism, recomputation, micro-batch, bucket size, overlap and
/// precision among the combinations validate() allows; a third of the plans (drawn from their
/// own stream, so the other draws are those of the grid without cp) add context parallelism 2.
inline std::vector<PlanSpec> plan_grid() {
  std::vector<PlanSpec> out;
  Rng rng(20261122);
  Rng cp_rng(20261123);
  for (const char* model : {"gpt2-124m", "gpt3-1.3b", "llama2-7b"})
    for (int tp : {1, 2, 4})
      for (int pp : {1, 2, 4})
        for (int dp : {1, 2})
          for (int variant = 0; variant < 2; ++variant) {
            PlanSpec s;
            s.model = model;
            s.dp = dp, s.tp = tp, s.pp = pp;
            const std::vector<plan::Schedule> schedules =
                pp == 1 ? std::vector<plan::Schedule>{plan::Schedule::one_f_one_b, plan::Schedule::gpipe}
                        : std::vector<plan::Schedule>{plan::Schedule::one_f_one_b, plan::Schedule::gpipe, plan::Schedule::interleaved_1f1b};
            s.schedule = schedules[rng.below(schedules.size())];
            s.vp = s.schedule == plan::Schedule::interleaved_1f1b ? 2 : 1;
            s.zero = static_cast<int>(rng.below(pp == 1 ? 4 : 2));
            s.algorithm = static_cast<plan::DpAlgorithm>(rng.below(s.zero == 0 ? std::size(plan::kDpAlgorithms) : 3));
            s.sp = tp > 1 && rng.below(2) == 1;
            s.recompute = static_cast<plan::Recompute>(rng.below(3));
            s.micro_batch = 1 + static_cast<int64_t>(rng.below(2));
            s.micro_batches = 4;
            s.bucket_size_bytes = std::vector<double>{25e6, 2e6, 1e5}[rng.below(3)];
            s.overlap = rng.below(4) != 0;
            if (rng.below(8) == 0) s.precision = Precision::fp32;
            if (cp_rng.below(3) == 0) s.cp = 2;
            out.push_back(s);
          }
  return out;
}

inline std::string describe(const PlanSpec& s) {
  return s.model + " dp" + std::to_string(s.dp) + " tp" + std::to_string(s.tp) + " pp" + std::to_string(s.pp) + " vp" +
         std::to_string(s.vp) + (s.cp > 1 ? " cp" + std::to_string(s.cp) : "") + " zero" + std::to_string(s.zero) +
         (s.sp ? " sp" : "") + " " +
         std::string(plan::recompute_name(s.recompute)) + " " + std::string(plan::schedule_name(s.schedule)) + " " +
         std::string(plan::dp_algorithm_name(s.algorithm)) + " b" + std::to_string(s.micro_batch) + " bucket" +
         std::to_string(static_cast<int64_t>(s.bucket_size_bytes)) + (s.overlap ? "" : " no-overlap") +
         (s.precision ? " fp32" : "");
}

/// Summed over every task of every rank.
struct Totals {
  double flops = 0;
  double recompute_flops = 0;
  size_t compute_tasks = 0;
  size_t tasks = 0;
  std::map<std::string, double> comm_bytes;  // "purpose/kind" -> bytes, summed over tasks
};

inline Totals totals(const plan::StepProgram& prog) {
  Totals t;
  for (const auto& rp : prog.ranks)
    for (const auto& task : rp.tasks) {
      ++t.tasks;
      if (task.kind == plan::TaskKind::compute) {
        ++t.compute_tasks;
        t.flops += task.flops;
        if (task.phase == plan::Phase::recompute) t.recompute_flops += task.flops;
      }
      if (task.kind == plan::TaskKind::collective || task.kind == plan::TaskKind::send || task.kind == plan::TaskKind::recv) {
        const std::string kind = task.kind == plan::TaskKind::collective ? std::string(plan::collective_kind_name(task.collective))
                                                                         : std::string(plan::task_kind_name(task.kind));
        t.comm_bytes[std::string(plan::comm_purpose_name(task.purpose)) + "/" + kind] += task.bytes;
      }
    }
  return t;
}

/// Peak of the live activation buffers when a rank's alloc/free tasks are replayed in program
/// order.
inline double activation_peak(const plan::RankProgram& rp) {
  double live = 0, peak = 0;
  for (const auto& t : rp.tasks) {
    if (t.buffer != plan::BufferKind::activations) continue;
    if (t.kind == plan::TaskKind::alloc) live += t.alloc_bytes;
    if (t.kind == plan::TaskKind::free) live -= t.alloc_bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace trainplan::testing
