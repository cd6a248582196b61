// Published measured runs as calibration input: the large-GEMM scale that step times identify.
#include <cmath>

#include "test_support.hpp"
#include "trainplan/calibration/nccl_tests.hpp"
#include "trainplan/calibration/published.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/simulator/compute_model.hpp"

using namespace trainplan;

namespace {

calibration::ValidationOptions threads2() {
  calibration::ValidationOptions o;
  o.threads = 2;
  return o;
}

json::Json mini() { return json::parse_file(testing::source_path("tests/calibration/data/published-mini.json")); }

// The mini file's A100 training points with "measured" step times that the simulator itself
// predicts at a known large-GEMM scale, plus two more batch sizes of the first point: a fit
// that recovers the scale is the oracle (the parameter is identifiable from step times).
json::Json synthetic(double scale, std::string& gpu) {
  json::Json doc = mini();
  json::Json pts = json::Json::array();
  for (const auto& p : doc["data_points"]) {
    if (p["kind"] != "training_throughput") continue;
    pts.push_back(p);
    if (p["id"] == "mini-narayanan-1.7B")
      for (int gb : {256, 1024}) {
        json::Json q = p;
        q["id"] = "mini-narayanan-1.7B-gb" + std::to_string(gb);
        q["parallelism"]["global_batch"] = gb;
        pts.push_back(q);
      }
  }
  doc["data_points"] = pts;
  calibration::ValidationOptions o;
  o.threads = 2;
  const auto r0 = calibration::validate_published_json(doc, "synthetic", hw::Catalog::builtin(), o);
  for (const auto& p : r0.points)
    if (p.id == "mini-narayanan-1.7B") gpu = p.gpu;
  o.calibrate = [&](const hw::GpuSpec& g, sim::SimOptions& so) {
    so.compute.gemm_efficiency_scale = scale;
    return g.name == gpu;
  };
  const auto r = calibration::validate_published_json(doc, "synthetic", hw::Catalog::builtin(), o);
  json::Json out = doc;
  out["data_points"] = json::Json::array();
  for (const auto& p : doc["data_points"]) {
    for (const auto& v : r.points) {
      if (v.id != p["id"].get<std::string>() || !v.mapped || v.gpu != gpu) continue;
      json::Json q = p;
      for (auto& [k, m] : q["metrics"].items())
        if (k != "other") m = nullptr;
      q["metrics"]["step_time_s"] = v.predicted;
      out["data_points"].push_back(q);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("published calibration: a known large-GEMM scale is recovered from step times it produced", "[calibration]") {
  std::string gpu;
  const json::Json doc = synthetic(0.7, gpu);
  REQUIRE(doc["data_points"].size() >= 3);
  calibration::Profile p = calibration::catalog_gpu_profile(hw::Catalog::builtin().gpu(gpu));
  calibration::FitOptions fo;
  fo.heldout_every = 3;
  const auto f = calibration::fit_published(p, doc, "synthetic", hw::Catalog::builtin(), fo, threads2());
  CHECK(p.gemm_efficiency_scale == Approx(0.7).epsilon(0.01));
  REQUIRE(f.points.size() == doc["data_points"].size());
  int held = 0;
  for (const auto& pt : f.points) {
    CHECK(pt.before_s < 0.95 * pt.measured_s);                    // uncalibrated: the GEMMs run faster
    CHECK(pt.after_s == Approx(pt.measured_s).epsilon(0.01));     // a full simulation at the fitted scale
    held += pt.heldout;
  }
  REQUIRE_FALSE(p.fit.empty());
  const auto& g = p.fit.back();
  CHECK(g.parameters == 1);
  CHECK(g.train_points + g.heldout_points == static_cast<int>(f.points.size()));
  CHECK(g.heldout_points == held);
  CHECK(g.train_median_error < 0.01);
  CHECK(f.simulations >= 3);
  // The profile carries the scale through JSON and into the simulator options.
  const calibration::Profile back = calibration::profile_from_json(calibration::to_json(p), "p.json");
  CHECK(back.gemm_efficiency_scale == Approx(p.gemm_efficiency_scale));
  CHECK(calibration::apply_profile(back, {}).compute.gemm_efficiency_scale == Approx(p.gemm_efficiency_scale));
}

TEST_CASE("published calibration: a GPU with fewer than two points is refused, naming the GPUs that have points", "[calibration]") {
  calibration::Profile p = calibration::catalog_gpu_profile(hw::Catalog::builtin().gpu("H200-SXM-141GB"));
  try {
    calibration::fit_published(p, mini(), "mini.json", hw::Catalog::builtin(), {}, threads2());
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("mini.json") != std::string::npos);
    CHECK(m.find("H200-SXM-141GB") != std::string::npos);
    CHECK(m.find("A100") != std::string::npos);  // a GPU that has points
  }
  CHECK(calibration::is_published_results(mini()));
  CHECK_FALSE(calibration::is_published_results(json::Json::object()));
}

TEST_CASE("compute model: the large-GEMM scale divides a compute-bound GEMM's time, capped at the peak", "[calibration]") {
  const hw::GpuSpec& gpu = hw::Catalog::builtin().gpu("H100-SXM5-80GB");
  plan::Task t;
  t.kind = plan::TaskKind::compute;
  t.op_kind = static_cast<int>(models::OpKind::linear);
  t.gemm_m = t.gemm_n = t.gemm_k = 8192;
  t.flops = 2.0 * 8192 * 8192 * 8192;
  sim::ComputeModelOptions o;
  o.kernel_overhead_s = 0;
  const double base = sim::ComputeModel(gpu, Precision::bf16, o).duration_s(t);
  o.gemm_efficiency_scale = 0.5;
  CHECK(sim::ComputeModel(gpu, Precision::bf16, o).duration_s(t) == Approx(2 * base));
  o.gemm_efficiency_scale = 5;  // 5 x MAMF is above the peak: the efficiency stops at 1
  const double eff = sim::ComputeModel(gpu, Precision::bf16, o).compute_efficiency(t.op_kind, 0, 0, 0);
  CHECK(eff == Approx(1.0));
  o.gemm_efficiency_scale = 0;
  CHECK_THROWS_AS(sim::ComputeModel(gpu, Precision::bf16, o), Error);
}
