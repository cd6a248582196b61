// Pipeline schedules as Megatron-LM orders them (megatron/core/pipeline_parallel/schedules.py:
// forward_backward_pipelining_without_interleaving and ..._with_interleaving).
#include <algorithm>

#include "trainplan/core/error.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::plan {

std::vector<PipelineStep> pipeline_order(Schedule schedule, int pp, int vp, int64_t num_micro_batches, int stage) {
  TP_ASSERT(pp >= 1 && vp >= 1 && num_micro_batches >= 1 && stage >= 0 && stage < pp);
  TP_ASSERT(vp == 1 || schedule == Schedule::interleaved_1f1b);
  const int64_t m = num_micro_batches;
  std::vector<PipelineStep> out;
  out.reserve(static_cast<size_t>(2 * m * vp));
  auto step = [](Phase phase, int64_t mb, int chunk) { return PipelineStep{phase, static_cast<int>(mb), chunk}; };
  switch (schedule) {
    case Schedule::gpipe:
      for (int64_t i = 0; i < m; ++i) out.push_back(step(Phase::forward, i, 0));
      for (int64_t i = 0; i < m; ++i) out.push_back(step(Phase::backward, i, 0));
      return out;
    case Schedule::one_f_one_b: {
      const int64_t warmup = std::min<int64_t>(pp - stage - 1, m);
      int64_t f = 0, b = 0;
      for (; f < warmup; ++f) out.push_back(step(Phase::forward, f, 0));
      while (f < m) {
        out.push_back(step(Phase::forward, f++, 0));
        out.push_back(step(Phase::backward, b++, 0));
      }
      while (b < m) out.push_back(step(Phase::backward, b++, 0));
      return out;
    }
    case Schedule::interleaved_1f1b: {
      // Virtual micro-batch k runs chunk (k mod p*v) / p (get_model_chunk_id; reversed in
      // backward); each chunk takes its micro-batches in order, p at a time.
      const int64_t group = static_cast<int64_t>(pp) * vp;
      const int64_t total = m * vp;
      auto at = [&](int64_t k, bool forward) {
        const int chunk_in_group = static_cast<int>((k % group) / pp);
        const int chunk = forward ? chunk_in_group : vp - 1 - chunk_in_group;
        return step(forward ? Phase::forward : Phase::backward, (k / group) * pp + k % pp, chunk);
      };
      // With as many micro-batches as stages Megatron runs all forwards, then all backwards.
      const int64_t warmup = m == pp ? total : std::min<int64_t>(static_cast<int64_t>(pp - stage - 1) * 2 + static_cast<int64_t>(vp - 1) * pp, total);
      int64_t f = 0, b = 0;
      for (; f < warmup; ++f) out.push_back(at(f, true));
      while (f < total) {
        out.push_back(at(f++, true));
        out.push_back(at(b++, false));
      }
      while (b < total) out.push_back(at(b++, false));
      return out;
    }
  }
  return out;
}

}  // namespace trainplan::plan
