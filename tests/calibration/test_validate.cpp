// Validation against published measurements: mapping, FLOP-convention conversions, errors.
#include <atomic>
#include <cmath>

#include "test_support.hpp"
#include "trainplan/calibration/validate.hpp"

using namespace trainplan;

namespace {
const calibration::ValidationPoint& point(const calibration::ValidationReport& r, const std::string& id) {
  for (const auto& p : r.points)
    if (p.id == id) return p;
  FAIL("no point " << id);
  return r.points.front();
}
}  // namespace

TEST_CASE("validate: published TFLOP/s are converted back to a step time with the source's FLOP formula", "[calibration]") {
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin(),
                                             {.threads = 2});
  const auto& n = point(r, "mini-narayanan-1.7B");
  REQUIRE(n.mapped);
  // F = 96 B s l h^2 (1 + s/6h + V/16lh); step = F / (137 TFLOP/s x 32 GPUs).
  const double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
  const double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  CHECK(n.measured == Approx(F / (137e12 * 32)));
  CHECK(n.cluster == "4 x dgx-a100-80gb");
  CHECK(n.error == Approx(n.predicted / n.measured - 1));
  CHECK(n.predicted > 0);
  const auto& m = point(r, "mini-mosaic-125m");
  REQUIRE(m.mapped);
  CHECK(m.measured == Approx(256.0 * 2048 / 1e6));  // global batch tokens / tokens per second
  CHECK(m.setup.find("zero3") != std::string::npos);
  CHECK(m.setup.find("flash") != std::string::npos);
}

TEST_CASE("validate: points that cannot be mapped say why", "[calibration]") {
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  CHECK(point(r, "mini-dgx2").reason.find("DGX-2") != std::string::npos);
  CHECK(point(r, "mini-claim").reason.find("vendor_claim") != std::string::npos);
  CHECK(r.training.points == 3);
  CHECK(r.training.unmapped == 1);  // the vendor claim is neither a training nor a collective point
}

TEST_CASE("validate: a context-parallel point maps onto a plan with cp, its published dp excluding cp", "[calibration]") {
  // NeMo's Llama 3 8B recipe on 8 H100: tp 1, pp 1, cp 2, dp 4 (Megatron's data-parallel size
  // leaves the cp ranks out: 8 GPUs = dp 4 x cp 2).
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  const auto& c = point(r, "mini-cp");
  REQUIRE(c.mapped);
  CHECK(c.cluster == "1 x dgx-h100");
  CHECK(c.setup.find("tp1 pp1 cp2 dp4") != std::string::npos);
  CHECK(c.measured == Approx(12.9));
  CHECK(c.predicted > 0);
  CHECK(c.error == Approx(c.predicted / c.measured - 1));
}

TEST_CASE("validate: a one-node all-reduce is predicted at the NVSwitch bus bandwidth", "[calibration]") {
  // Ring all-reduce of S over 8 GPUs on NVSwitch at B per direction: busbw = 2(n-1)/n S / t -> B
  // for large S (the link bandwidth, 450 GB/s on DGX H100), minus latency.
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  const auto& c = point(r, "mini-nccl-1n");
  REQUIRE(c.mapped);
  CHECK(c.metric == "busbw_GBps");
  CHECK(c.predicted == Approx(450.0).epsilon(0.01));
  CHECK(c.error == Approx(450.0 / 480.0 - 1).epsilon(0.02));
  CHECK(r.collectives.points == 1);
  CHECK(r.collectives.mape == Approx(std::fabs(c.error)));
}

TEST_CASE("validate: a malformed file is an error naming it", "[calibration]") {
  auto doc = json::parse_text(R"({"data_points": 3})", "bad.json");
  REQUIRE_ERROR_CONTAINS(calibration::validate_published_json(doc, "bad.json", hw::Catalog::builtin()), "bad.json: /data_points: must be an array");
}

TEST_CASE("validate: the analytical estimate comes through the caller's callback, and is absent without one", "[calibration]") {
  // A fake estimator in place of planner::estimate_step (wired by the CLI): 1 s per step for
  // every plan, and a refusal for context-parallel plans.
  const std::string file = testing::source_path("tests/calibration/data/published-mini.json");
  calibration::ValidationOptions o;
  o.threads = 2;
  std::atomic<int> calls{0};
  o.analytical_step_s = [&calls](const plan::Plan& p, const plan::PlanContext&) {
    ++calls;
    if (p.cp > 1) throw Error("fake estimator: no context parallelism");
    return 1.0;
  };
  const auto r = calibration::validate_published(file, hw::Catalog::builtin(), o);
  CHECK(r.analytical);
  CHECK(calls == 3);  // the three training points that map onto a plan
  const auto& n = point(r, "mini-narayanan-1.7B");
  const auto& m = point(r, "mini-mosaic-125m");
  REQUIRE(n.mapped);
  REQUIRE(m.mapped);
  CHECK(n.predicted_analytical == 1.0);
  CHECK(n.error_analytical == Approx(1.0 / n.measured - 1));
  const auto& c = point(r, "mini-cp");
  CHECK_FALSE(c.mapped);
  CHECK(c.reason.find("fake estimator: no context parallelism") != std::string::npos);
  CHECK(r.training.mape_analytical == Approx((std::fabs(n.error_analytical) + std::fabs(m.error_analytical)) / 2));
  const auto j = calibration::to_json(r);
  CHECK(j["training"].contains("mape_analytical"));
  bool seen = false;
  for (const auto& q : j["points"])
    if (q["id"] == "mini-narayanan-1.7B") {
      seen = true;
      CHECK(q["predicted_analytical"].get<double>() == 1.0);
    }
  CHECK(seen);

  calibration::ValidationOptions plain;
  plain.threads = 2;
  const auto without = calibration::validate_published(file, hw::Catalog::builtin(), plain);
  CHECK_FALSE(without.analytical);
  CHECK(point(without, "mini-cp").mapped);
  CHECK(point(without, "mini-narayanan-1.7B").predicted_analytical == 0);
  const auto jw = calibration::to_json(without);
  CHECK_FALSE(jw["training"].contains("mape_analytical"));
  for (const auto& q : jw["points"]) CHECK_FALSE(q.contains("predicted_analytical"));
}
