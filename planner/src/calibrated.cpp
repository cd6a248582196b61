// Calibration profiles in the search (calibrated.hpp).
#include "trainplan/planner/calibrated.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "trainplan/core/error.hpp"

namespace trainplan::planner {
namespace {

constexpr const char* kUncalibrated = "uncalibrated (catalog peaks and documented efficiency defaults)";

}  // namespace

AnalyticalOptions calibrated_options(const calibration::Profile& profile, const std::string& path,
                                     const AnalyticalOptions& base) {
  sim::SimOptions s;
  s.compute = base.compute;
  s.calibration = base.calibration;
  s = calibration::apply_profile(profile, s);
  AnalyticalOptions out = base;
  out.compute = s.compute;
  out.calibration = s.calibration;
  out.calibration_label = fmt::format("calibration profile {} ({}, fitted {})", path, profile.hardware, profile.date);
  return out;
}

sim::SimOptions with_calibration(sim::SimOptions so, const AnalyticalOptions& options) {
  so.compute = options.compute;
  so.calibration = options.calibration;
  return so;
}

void load_calibration_profiles(SearchRequest& req, const std::string& explicit_profile) {
  if (!explicit_profile.empty()) {
    const calibration::Profile p = calibration::read_profile_file(explicit_profile);
    if (p.backend == "cpu")
      throw Error(fmt::format("the profile was fitted on the cpu backend ({}): it predicts trainplan execute on that "
                              "machine, not GPU instances",
                              p.hardware))
          .at(explicit_profile, "/backend")
          .hint("use it with trainplan simulate --on-calibrated-hardware or execute; for a search, calibrate on the GPU "
                "type (trainplan bench --backend cuda)");
    req.analytical_by_gpu[p.hardware] = calibrated_options(p, explicit_profile, req.analytical);
  }
  const std::filesystem::path dir = calibration::profile_directory();
  std::error_code ec;
  std::set<std::filesystem::path> files;
  if (std::filesystem::is_directory(dir, ec))
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.path().extension() == ".json" && entry.is_regular_file(ec)) files.insert(entry.path());
  for (const auto& file : files) {
    if (!calibration::is_profile_file(file.string())) continue;
    const calibration::Profile p = calibration::read_profile_file(file.string());
    // The default profile of a hardware is the file named after it; others in the folder are
    // kept profiles that the user names explicitly.
    if (p.backend == "cpu" || file != std::filesystem::path(calibration::default_profile_path(p.hardware))) continue;
    if (!req.analytical_by_gpu.count(p.hardware))
      req.analytical_by_gpu[p.hardware] = calibrated_options(p, file.string(), req.analytical);
  }
  // Then the built-in profiles, unless the directory was named explicitly (it is the whole search).
  if (calibration::profile_directory_is_explicit()) return;
  for (const auto& name : calibration::builtin_profiles()) {
    const calibration::Profile p = calibration::read_profile_file(name);
    if (p.backend != "cpu" && !req.analytical_by_gpu.count(p.hardware))
      req.analytical_by_gpu[p.hardware] = calibrated_options(p, name, req.analytical);
  }
}

std::string calibration_label(const SearchRequest& req, const hw::GpuSpec& gpu) {
  const std::string& l = req.analytical_for(gpu).calibration_label;
  return l.empty() ? kUncalibrated : l;
}

std::string calibration_summary(const SearchRequest& req) {
  if (req.analytical_by_gpu.empty()) return req.analytical.calibration_label.empty() ? kUncalibrated : req.analytical.calibration_label;
  std::string out;
  for (const auto& [gpu, o] : req.analytical_by_gpu) out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", gpu, o.calibration_label);
  return out + "; other GPU types uncalibrated";
}

}  // namespace trainplan::planner
