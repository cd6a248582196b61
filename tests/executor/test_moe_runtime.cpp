// A tiny mixture-of-experts decoder (tests/executor/data/tiny-moe.json: 2 llama blocks of
// hidden 32, 4 SwiGLU experts of width 32, top-2, a shared expert, vocabulary 64) trained by the runtime: data parallelism with and without expert parallelism
// computes the single-rank step (losses, gradients and parameters within float32 noise), each
// rank holds only its experts, and plans the runtime does not execute are refused by name.
#include <filesystem>
#include <map>
#include <mutex>

#include "runtime_fixture.hpp"
#include "trainplan/executor/checkpoint.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

namespace {

// As in test_equivalence.cpp: float32 reorderings (the expert rows of two dp ranks summed in
// one GEMM instead of two, reductions in double) stay below 1e-5 of each tensor's largest
// element; eps 1e-4 keeps AdamW from amplifying the noise of exactly-zero gradients.
constexpr double kRelTol = 1e-5;
constexpr int kSteps = 3;
constexpr int64_t kExperts = 4;

RunSpec moe(int dp, int ep) {
  RunSpec s;
  s.model = "tiny-moe";
  s.dp = dp, s.ep = ep;
  return s;
}

RuntimeOptions moe_options() {
  RuntimeOptions o = test_options();
  o.adamw.eps = 1e-4;
  return o;
}

std::unique_ptr<Runtime> moe_runtime(const RunSpec& s) { return make_runtime(s, moe_options()); }

const StepRecord& moe_reference() {
  static std::mutex mutex;
  static std::unique_ptr<StepRecord> ref;
  std::lock_guard<std::mutex> lock(mutex);
  if (!ref) {
    auto rt = moe_runtime(moe(1, 1));
    ref = std::make_unique<StepRecord>(run_steps(*rt, kSteps));
  }
  return *ref;
}

void check_equals_one_rank(const RunSpec& r) {
  const StepRecord& ref = moe_reference();
  auto rt = moe_runtime(r);
  const StepRecord got = run_steps(*rt, kSteps);
  // The program carries every all-to-all and expert-gradient reduction: the runtime adds none.
  check_matches_one_rank(*rt, got, ref, kRelTol);
}

}  // namespace

TEST_CASE("executor: a tiny MoE decoder learns on one rank and its router weights move", "[executor][moe]") {
  const StepRecord& ref = moe_reference();
  REQUIRE(ref.losses.size() == static_cast<size_t>(kSteps));
  for (double l : ref.losses) CHECK(std::isfinite(l));
  // Random initial logits over 64 tokens: the first loss is near ln 64.
  CHECK(ref.losses[0] == Approx(std::log(64.0)).epsilon(0.05));
  CHECK(ref.losses.back() < ref.losses.front());
  auto rt = moe_runtime(moe(1, 1));
  const std::vector<std::string> names = rt->parameter_names();
  int routers = 0, experts = 0;
  for (size_t p = 0; p < names.size(); ++p) {
    if (names[p].find(".mlp.router.weight") != std::string::npos) {
      ++routers;
      CHECK(rt->parameter_shape(names[p]) == Shape{kExperts, 32});
      double norm = 0;
      for (double g : ref.grads[p]) norm += g * g;
      CHECK(norm > 0);  // the combine's weight gradients reach the router
    }
    if (names[p].find(".mlp.experts.fc1.weight") != std::string::npos) {
      ++experts;
      CHECK(rt->parameter_shape(names[p]) == Shape{kExperts * 2 * 32, 32});  // E x [gate | up] rows
    }
  }
  CHECK(routers == 2);
  CHECK(experts == 2);
}

TEST_CASE("executor: a tiny MoE with dp 2 and ep 1 or 2 equals one rank", "[executor][moe][equivalence]") {
  for (const RunSpec& r : {moe(2, 1), moe(2, 2)}) {
    DYNAMIC_SECTION("dp " << r.dp << " ep " << r.ep) { check_equals_one_rank(r); }
  }
}

TEST_CASE("executor: MoE expert parallelism with expert-data-parallel replicas, micro-batches and recomputation "
          "equals one rank",
          "[executor][moe][equivalence]") {
  std::vector<RunSpec> runs = {moe(4, 2), moe(4, 4), moe(2, 2), moe(2, 2), moe(2, 2)};
  // dp 4 ep 2: expert_dp 2, the expert gradients are all-reduced over 2 ranks; dp 4 ep 4: one
  // expert per rank; 2 micro-batches: routing per micro-batch; full recomputation: the
  // all-to-alls run again before the backward; pp 2 (1F1B over 2 micro-batches): each stage's
  // ep group exchanges its own block's tokens.
  runs[2].micro_batch = 2;
  runs[3].recompute = plan::Recompute::full;
  runs[4].pp = 2;
  runs[4].micro_batch = 2;
  for (const RunSpec& r : runs) {
    DYNAMIC_SECTION("dp " << r.dp << " ep " << r.ep << " pp " << r.pp << " micro-batch " << r.micro_batch << " recompute "
                          << plan::recompute_name(r.recompute)) {
      check_equals_one_rank(r);
    }
  }
}

TEST_CASE("executor: under ep each rank's checkpoint shard holds only its experts", "[executor][moe]") {
  auto rt = moe_runtime(moe(2, 2));
  rt->step();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "trainplan-moe-shards";
  std::filesystem::remove_all(dir);
  rt->save_checkpoint(dir.string());
  const checkpoint::Manifest m = checkpoint::read_manifest(dir.string());
  REQUIRE(m.shards.size() == 2);
  const int64_t full = kExperts * 2 * 32 * 32;  // fc1: E x (2 f) x h
  for (int r = 0; r < 2; ++r) {
    const checkpoint::Shard s = checkpoint::read_shard(dir.string(), m.shards[static_cast<size_t>(r)], 2);
    std::map<std::string, int64_t> numel;
    for (const auto& t : s.tensors) numel[t.name] = t.numel;
    INFO("rank " << r);
    CHECK(numel.at("block1.mlp.experts.fc1.weight:value") == full / 2);
    CHECK(numel.at("block1.mlp.experts.fc1.weight:adam_m") == full / 2);
    CHECK(numel.at("block1.mlp.router.weight:value") == kExperts * 32);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("executor: MoE plans the runtime does not execute are refused by name", "[executor][moe]") {
  RunSpec zero = moe(2, 2), tp = moe(1, 1);
  zero.zero = 1;
  tp.tp = 2;
  REQUIRE_ERROR_CONTAINS(moe_runtime(zero), "expert parallelism (ep = 2) with ZeRO stage 1");
  REQUIRE_ERROR_CONTAINS(moe_runtime(tp), "mixture-of-experts layers, which the runtime executes with tp = 1");
}

TEST_CASE("executor: a MoE capacity factor drops the same copies with ep 2 as with ep 1, and none at c >= E / k",
          "[executor][moe][equivalence]") {
  // Each rank keeps at most ceil(c N k / E) copies per expert of its micro-batch's N tokens
  // (lowest token index first), so expert parallelism, which only moves the copies, computes
  // what ep 1 computes at the same dp.
  RunSpec ep1 = moe(2, 1), ep2 = moe(2, 2);
  ep1.capacity_factor = ep2.capacity_factor = 1.0;
  auto a = moe_runtime(ep1);
  auto b = moe_runtime(ep2);
  const StepRecord ra = run_steps(*a, kSteps), rb = run_steps(*b, kSteps);
  check_matches_one_rank(*b, rb, ra, kRelTol);
  // Capacity 1 drops copies (random routing is never perfectly balanced): the loss moves.
  const StepRecord& dropless = moe_reference();
  CHECK(std::abs(ra.losses[0] - dropless.losses[0]) > 1e-6);
  // c = E / k = 2: capacity N, and an expert gets at most one copy per token: nothing drops,
  // the run is the dropless one bit for bit.
  RunSpec roomy = moe(1, 1);
  roomy.capacity_factor = 2.0;
  auto c = moe_runtime(roomy);
  CHECK(run_steps(*c, kSteps).losses == dropless.losses);
}
