// The built-in calibration profiles: embedded from calibration/profiles, made from the
// measurements in calibration/data (scripts/builtin-profiles.sh), found after the user's own.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "test_support.hpp"
#include "trainplan/calibration/measurements.hpp"
#include "trainplan/calibration/profile.hpp"

using namespace trainplan;

namespace {

// Sets or unsets environment variables for one test, restoring them after.
struct Env {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& k, const char* v) {
    const char* old = std::getenv(k.c_str());
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    if (v) ::setenv(k.c_str(), v, 1);
    else ::unsetenv(k.c_str());
  }
  ~Env() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
};

std::filesystem::path temp_dir(const std::string& tag) {
  const auto d = std::filesystem::temp_directory_path() / ("trainplan-builtin-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("built-in profiles: each is calibrate's output on data in the repository, by the inputs' hashes", "[calibration]") {
  const auto names = calibration::builtin_profiles();
  REQUIRE_FALSE(names.empty());
  for (const auto& name : names) {
    INFO(name);
    REQUIRE(name.rfind("builtin:calibration/profiles/", 0) == 0);
    const calibration::Profile p = calibration::read_profile_file(name);
    CHECK_FALSE(p.hardware.empty());
    CHECK_FALSE(p.fit.empty());
    REQUIRE_FALSE(p.inputs.empty());
    // The profile file calibration/profiles/<name>.json comes from calibration/data/<name>/.
    const std::string stem = std::filesystem::path(name.substr(8)).stem().string();
    int bench = 0;
    for (const auto& in : p.inputs) {
      const std::string file = testing::source_path("calibration/data/" + stem + "/" + in.path);
      INFO(file);
      REQUIRE(std::filesystem::exists(file));
      CHECK(calibration::file_xxh64(file) == in.xxh64);  // the data as committed, unchanged
      bench += in.kind == "bench";
    }
    CHECK(bench == 1);
    CHECK(calibration::find_builtin_profile(p.hardware) == name);
  }
  CHECK(calibration::find_builtin_profile("no such hardware").empty());
  CHECK_THROWS_AS(calibration::read_profile_file("builtin:calibration/profiles/none.json"), Error);
}

TEST_CASE("built-in profiles: the user's directory wins, an explicit directory is the whole search", "[calibration]") {
  const std::string name = calibration::builtin_profiles().at(0);
  const std::string hw = calibration::read_profile_file(name).hardware;
  const auto xdg = temp_dir("xdg"), explicit_dir = temp_dir("explicit");
  Env env;
  env.set("TRAINPLAN_CALIBRATION_DIR", nullptr);
  env.set("XDG_CONFIG_HOME", xdg.c_str());
  CHECK_FALSE(calibration::profile_directory_is_explicit());
  CHECK(calibration::find_default_profile(hw) == name);  // nothing of the user's: the built-in one
  // A profile of the user's for that hardware, under its default name, wins.
  calibration::Profile mine = calibration::read_profile_file(name);
  mine.kernel_overhead_s = 1e-3;
  const std::string user_file = calibration::default_profile_path(hw);
  std::filesystem::create_directories(std::filesystem::path(user_file).parent_path());
  json::write_file(user_file, calibration::to_json(mine));
  CHECK(calibration::find_default_profile(hw) == user_file);
  // $TRAINPLAN_CALIBRATION_DIR names the only place to look.
  env.set("TRAINPLAN_CALIBRATION_DIR", explicit_dir.c_str());
  CHECK(calibration::profile_directory_is_explicit());
  CHECK(calibration::find_default_profile(hw).empty());
  std::error_code ec;
  std::filesystem::remove_all(xdg, ec);
  std::filesystem::remove_all(explicit_dir, ec);
}

TEST_CASE("built-in profiles: the CPU key names the model and how many CPUs this process may use", "[calibration]") {
  const std::string key = calibration::host_cpu_hardware();
  CHECK(key.rfind("cpu:", 0) == 0);
  CHECK(key.find(" cpu") != std::string::npos);
  CHECK(key.back() == ')');
}
