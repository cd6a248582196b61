// File: trainplan/planner/calibrated.hpp
//
// Calibration profiles (calibration/profile.hpp) in the planner: the analytical estimate and
// the simulation of candidates on a GPU type use the profile fitted on that GPU type. A profile
// named by the user (`--calibration PROFILE`) applies to its own hardware; every other GPU type
// takes its default profile from the profile directory (calibration::profile_directory(): the
// file named after the hardware key), else runs uncalibrated. Profiles of the CPU backend are
// for predicting `trainplan execute` on the measured machine and never apply to a search.
#pragma once

#include <string>

#include "trainplan/calibration/profile.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/search.hpp"

namespace trainplan::planner {

/// `base` with the profile's compute settings (efficiency per op kind and pass, kernel
/// overhead) and a label naming the profile file.
AnalyticalOptions calibrated_options(const calibration::Profile& profile, const std::string& path,
                                     const AnalyticalOptions& base = {});

/// `so` with the compute settings of `options` (what simulate_candidate simulates with).
sim::SimOptions with_calibration(sim::SimOptions so, const AnalyticalOptions& options);

/// Fills req.analytical_by_gpu: `explicit_profile` ("" for none) for its hardware, the profile
/// directory's default profiles for the others. Throws Error naming the file for a profile that
/// cannot be read, or an explicit one of the CPU backend.
void load_calibration_profiles(SearchRequest& req, const std::string& explicit_profile);

/// What the search of `req` is calibrated with, for outputs: "uncalibrated (...)" or one
/// "GPU: calibration profile PATH (...)" per calibrated GPU type, "; others uncalibrated".
std::string calibration_summary(const SearchRequest& req);

/// The label of the options a plan on `gpu` is predicted with.
std::string calibration_label(const SearchRequest& req, const hw::GpuSpec& gpu);

}  // namespace trainplan::planner
