// Calibration profiles in the planner (planner/calibrated.hpp): the profile fitted on a GPU type
// reaches the analytical estimate and the candidates' simulation of plans on that GPU type, the
// same way `trainplan simulate --calibration` applies it; the profile directory supplies
// defaults; profiles of the CPU backend never apply to a search. Oracles: a plan of one GPU
// whose step is compute only, where halving every efficiency doubles the op time (closed form),
// and sim::simulate_plan with calibration::apply_profile (what `trainplan simulate` runs).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "trainplan/calibration/profile.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/planner/calibrated.hpp"
#include "trainplan/planner/search_io.hpp"
#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

using namespace trainplan;

namespace {

// A profile for `gpu` with every op kind at efficiency `e` in both passes, no kernel overhead.
calibration::Profile profile_for(const std::string& gpu, double e, const std::string& backend = "cuda") {
  calibration::Profile p;
  p.hardware = gpu;
  p.backend = backend;
  p.peak_flops_per_s = 1e14;
  p.memory_bytes_per_s = 1e12;
  p.kernel_overhead_s = 0;
  for (const std::string& name : sim::calibration_op_kind_names()) {
    const int k = *sim::parse_calibration_op_kind(name);
    if (k == sim::kOpKindAny) continue;
    p.efficiency[k] = e;
    p.efficiency_backward[k] = e;
  }
  p.date = "2026-11-26T00:00:00Z";
  return p;
}

// A temporary profile directory for the test, set as $TRAINPLAN_CALIBRATION_DIR.
struct ProfileDir {
  std::filesystem::path dir;
  ProfileDir() {
    dir = std::filesystem::temp_directory_path() / ("trainplan-calib-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    ::setenv("TRAINPLAN_CALIBRATION_DIR", dir.c_str(), 1);
  }
  ~ProfileDir() {
    ::unsetenv("TRAINPLAN_CALIBRATION_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string write(const calibration::Profile& p, const std::string& name) const {
    const std::string path = (dir / name).string();
    json::write_file(path, calibration::to_json(p));
    return path;
  }
};

plan::Plan one_gpu_plan() {
  plan::Plan p;
  p.model = "gpt2-124m";
  p.instance_type = "p3.2xlarge";
  p.instance_count = 1;
  p.global_batch = 8;
  p.micro_batch = 8;
  return p;
}

}  // namespace

TEST_CASE("planner: a GPU type's default profile reaches the estimate and the simulated candidate", "[planner]") {
  ProfileDir profiles;
  plan::Plan p = one_gpu_plan();
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
  ctx.software = hw::SoftwareStack{};  // no host model: the closed form below is GPU time only
  const std::string gpu = ctx.gpu->name;

  planner::SearchRequest none;
  planner::load_calibration_profiles(none, "");
  CHECK(none.analytical_by_gpu.empty());
  CHECK(planner::calibration_summary(none).rfind("uncalibrated", 0) == 0);

  // Two profiles at efficiencies 0.5 and 0.25 (no kernel overhead): on one GPU the step is
  // compute and optimizer only, so the second takes twice as long (closed form).
  const std::string half = profiles.write(profile_for(gpu, 0.5), calibration::default_profile_path(gpu).substr(profiles.dir.string().size() + 1));
  planner::SearchRequest a;
  planner::load_calibration_profiles(a, "");
  REQUIRE(a.analytical_by_gpu.count(gpu) == 1);
  CHECK(planner::calibration_label(a, *ctx.gpu).find(half) != std::string::npos);
  const std::string quarter = profiles.write(profile_for(gpu, 0.25), "kept.json");
  planner::SearchRequest b;
  planner::load_calibration_profiles(b, quarter);  // explicit: wins over the directory's default
  CHECK(planner::calibration_label(b, *ctx.gpu).find("kept.json") != std::string::npos);

  const double ta = planner::estimate_step(p, ctx, a.analytical_for(*ctx.gpu)).step_time_s;
  const double tb = planner::estimate_step(p, ctx, b.analytical_for(*ctx.gpu)).step_time_s;
  CHECK(tb == Approx(2 * ta).epsilon(1e-6));
  const double sa = planner::simulate_candidate(p, ctx, a.analytical_for(*ctx.gpu)).step_time_s;
  const double sb = planner::simulate_candidate(p, ctx, b.analytical_for(*ctx.gpu)).step_time_s;
  CHECK(sb == Approx(2 * sa).epsilon(1e-6));

  // `trainplan simulate --calibration` (calibration::apply_profile on sim::simulate_plan at the
  // candidate's fidelity) predicts the same step as the search.
  sim::PlanSimOptions o;
  o.granularity = plan::Granularity::layer;
  o.fidelity = sim::Fidelity::symmetric;
  o.memory_events = false;
  o.sim.record_timeline = false;
  o.sim = calibration::apply_profile(calibration::read_profile_file(quarter), o.sim);
  CHECK(sim::simulate_plan(p, ctx, o).step.step_time_s == Approx(sb).epsilon(1e-9));

  // Another GPU type stays uncalibrated.
  const hw::GpuSpec& other = hw::Catalog::builtin().gpu("A100-SXM4-40GB");
  CHECK(planner::calibration_label(b, other).rfind("uncalibrated", 0) == 0);
}

TEST_CASE("planner: a profile of the cpu backend is refused by a search, and is no default", "[planner]") {
  ProfileDir profiles;
  const std::string cpu = profiles.write(profile_for("cpu:Test CPU", 0.5, "cpu"),
                                         calibration::default_profile_path("cpu:Test CPU").substr(profiles.dir.string().size() + 1));
  planner::SearchRequest r;
  planner::load_calibration_profiles(r, "");
  CHECK(r.analytical_by_gpu.empty());
  CHECK_THROWS_WITH(planner::load_calibration_profiles(r, cpu), Catch::Contains("cpu backend") && Catch::Contains("/backend"));
  planner::SearchOptions so;
  so.model = "gpt2-124m";
  so.tokens = "1e9";
  so.calibration = cpu;
  CHECK_THROWS_WITH(planner::search_request(so), Catch::Contains("cpu backend"));
}
