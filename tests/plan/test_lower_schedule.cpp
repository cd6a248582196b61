// Pipeline schedules of plan::lower() against hand-written orders derived from Megatron-LM's
// rules (schedules.py): 1F1B warm-up min(p - s - 1, m); interleaved 1F1B with
// get_model_chunk_id, warm-up (p - s - 1) * 2 + (v - 1) * p and all forwards first when m == p.
#include <sstream>

#include "test_lower_fixture.hpp"

using namespace trainplan;
using testing::PlanSpec;

namespace {

// "F<mb>.<chunk>" / "B<mb>.<chunk>" separated by spaces.
std::string render(const std::vector<plan::PipelineStep>& steps) {
  std::ostringstream os;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i) os << ' ';
    os << (steps[i].phase == plan::Phase::forward ? 'F' : 'B') << steps[i].micro_batch << '.' << steps[i].chunk;
  }
  return os.str();
}

// The (phase, micro-batch, chunk) sequence of a rank's forward and backward compute tasks.
std::vector<plan::PipelineStep> program_order(const plan::RankProgram& rp) {
  std::vector<plan::PipelineStep> out;
  for (const auto& t : rp.tasks) {
    if (t.kind != plan::TaskKind::compute || (t.phase != plan::Phase::forward && t.phase != plan::Phase::backward)) continue;
    plan::PipelineStep s{t.phase, t.micro_batch, t.virtual_stage};
    const auto& last = out.empty() ? plan::PipelineStep{plan::Phase::none, -1, -1} : out.back();
    if (last.phase != s.phase || last.micro_batch != s.micro_batch || last.chunk != s.chunk) out.push_back(s);
  }
  return out;
}

// Forwards before the first backward: the warm-up plus the first steady-state forward.
int64_t leading_forwards(const std::vector<plan::PipelineStep>& steps) {
  int64_t n = 0;
  while (n < static_cast<int64_t>(steps.size()) && steps[static_cast<size_t>(n)].phase == plan::Phase::forward) ++n;
  return n;
}

}  // namespace

TEST_CASE("lower: 1F1B runs min(p - s - 1, m) warm-up forwards, then one forward one backward", "[plan][lower]") {
  // p = 4, m = 8: stage 1 warms up with 2 forwards.
  CHECK(render(plan::pipeline_order(plan::Schedule::one_f_one_b, 4, 1, 8, 1)) ==
        "F0.0 F1.0 F2.0 B0.0 F3.0 B1.0 F4.0 B2.0 F5.0 B3.0 F6.0 B4.0 F7.0 B5.0 B6.0 B7.0");
  CHECK(render(plan::pipeline_order(plan::Schedule::one_f_one_b, 4, 1, 8, 3)) ==
        "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0 F6.0 B6.0 F7.0 B7.0");
  // Fewer micro-batches than warm-up slots: all forwards, then all backwards.
  CHECK(render(plan::pipeline_order(plan::Schedule::one_f_one_b, 8, 1, 3, 0)) == "F0.0 F1.0 F2.0 B0.0 B1.0 B2.0");
  for (int p : {2, 4, 8})
    for (int64_t m : {1, 3, 8, 16})
      for (int s = 0; s < p; ++s)
        CHECK(leading_forwards(plan::pipeline_order(plan::Schedule::one_f_one_b, p, 1, m, s)) == std::min<int64_t>(p - s, m));
}

TEST_CASE("lower: GPipe runs all forwards, then all backwards in micro-batch order", "[plan][lower]") {
  CHECK(render(plan::pipeline_order(plan::Schedule::gpipe, 4, 1, 4, 2)) == "F0.0 F1.0 F2.0 F3.0 B0.0 B1.0 B2.0 B3.0");
}

TEST_CASE("lower: interleaved 1F1B for p=4, m=8, v=2 follows Megatron's chunk order", "[plan][lower]") {
  // Forward virtual micro-batches k = 0..15 run chunk (k mod 8) / 4 on micro-batch
  // (k / 8) * 4 + k mod 4; backward ones the mirrored chunk. Warm-up 10 - 2s.
  const std::vector<std::string> expected = {
      "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
      "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
      "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
      "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 "
      "F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 F5.1 B1.0 F6.1 B2.0 F7.1 B3.0 "
      "B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
      "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 "
      "F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 F7.0 B1.0 F4.1 B2.0 F5.1 B3.0 F6.1 B4.1 F7.1 B5.1 "
      "B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
      "F0.0 F1.0 F2.0 F3.0 "
      "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
      "B4.0 B5.0 B6.0 B7.0",
  };
  for (int s = 0; s < 4; ++s) {
    INFO("stage " << s);
    CHECK(render(plan::pipeline_order(plan::Schedule::interleaved_1f1b, 4, 2, 8, s)) == expected[static_cast<size_t>(s)]);
    CHECK(leading_forwards(plan::pipeline_order(plan::Schedule::interleaved_1f1b, 4, 2, 8, s)) == 10 - 2 * s + 1);
  }
  // m == p: Megatron runs every forward before the first backward on all stages.
  const auto all = plan::pipeline_order(plan::Schedule::interleaved_1f1b, 4, 2, 4, 3);
  CHECK(leading_forwards(all) == 8);
  CHECK(render(all) == "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
}

TEST_CASE("lower: each rank's compute tasks follow its pipeline schedule", "[plan][lower]") {
  for (auto schedule : {plan::Schedule::gpipe, plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b}) {
    PlanSpec s;
    s.model = "gpt3-1.3b";
    s.pp = 4;
    s.tp = 2;
    s.micro_batches = 8;
    s.schedule = schedule;
    s.vp = schedule == plan::Schedule::interleaved_1f1b ? 2 : 1;
    s.recompute = plan::Recompute::full;
    auto r = testing::resolve_plan(s);
    const auto prog = plan::lower(r->plan, r->ctx, {.granularity = plan::Granularity::layer});
    for (int stage = 0; stage < s.pp; ++stage) {
      INFO(plan::schedule_name(schedule) << " stage " << stage);
      CHECK(render(program_order(prog.ranks[static_cast<size_t>(prog.rank_of(0, 1, stage))])) ==
            render(plan::pipeline_order(schedule, s.pp, s.vp, s.micro_batches, stage)));
    }
  }
}
