// File: trainplan/calibration/profile.hpp
//
// A calibration profile: the simulator's own parameters fitted to measurements of one kind of
// hardware, with provenance. `trainplan calibrate` writes it; `trainplan simulate
// --calibration` reads it.
//
//   {"schema_version": 1, "kind": "trainplan-calibration-profile",
//    "hardware": "cpu:AMD EPYC 7R13 Processor", "backend": "cpu",
//    "device": {"peak_flops_per_s": 3.1e10, "memory_bytes_per_s": 9.8e9},
//    "compute": {"kernel_overhead_s": 4.1e-6,
//                "efficiency": {"linear": 0.41, "attention": 0.12, "layernorm": 0.33, ...},
//                "efficiency_backward": {"linear": 0.35, "attention": 0.10, ...}},
//    "communication": {"algorithm": "ring", "link": "in-process",
//                      "latency_s": 2.1e-5, "busbw_bytes_per_s": 3.3e9},
//    "fit": [{"group": "compute/linear", "parameters": 1, "train_points": 90,
//             "heldout_points": 30, "train_median_error": 0.04, "heldout_median_error": 0.05,
//             "heldout_worst_error": 0.21}, ...],
//    "provenance": {"date": "...", "software": {...},
//                   "inputs": [{"path": "a1.timeline.json", "kind": "timeline", "xxh64": "..."}]}}
//
// The compute model it fits is the simulator's (sim::ComputeModel::op_duration_s) on a device
// whose peaks are the benchmark's roofline (best matmul FLOP/s, best memory-bound bytes/s):
//
//   task seconds = sum over its ops of (max(FLOPs / peak, bytes / bandwidth) + serial bytes /
//                  bandwidth) / efficiency[op kind, pass] + kernel_overhead x kernels
//
// with one efficiency per op kind and pass (forward or optimizer; backward).
//
// so the fitted efficiencies and overhead go into the simulator unchanged, as a
// sim::CalibrationTable (compute and memory efficiency per op kind) and
// ComputeModelOptions::kernel_overhead_s. Efficiencies above 1 (a kind that beats the
// benchmark's best rate) are clamped to 1 and the fit group says so.
//
// A profile applies to its hardware only: check_profile_applies() refuses another GPU type
// unless the caller passes an explicit override.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainplan/calibration/measurements.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/simulator/simulate.hpp"

namespace trainplan::calibration {

inline constexpr int kProfileSchemaVersion = 1;

struct FitGroup {
  std::string group;            // "compute/linear", "compute/kernel_overhead", "communication/ring/in-process"
  int parameters = 0;
  int train_points = 0, heldout_points = 0;
  double train_median_error = 0, heldout_median_error = 0, heldout_worst_error = 0;
  std::string note;             // e.g. "clamped to 1"
};

struct ProfileInput {
  std::string path;
  std::string kind;  // "bench", "timeline", "nccl-tests", "published"
  std::string xxh64;
};

struct Profile {
  int schema_version = kProfileSchemaVersion;
  std::string hardware;
  std::string backend;
  double peak_flops_per_s = 0;
  double memory_bytes_per_s = 0;
  /// < 0: not fitted (the simulator's default applies).
  double kernel_overhead_s = -1;
  /// Ratio of the large-GEMM efficiency to the simulator's default (the catalog's MAMF): fitted
  /// from measured step times of a catalog GPU (published points, calibration/published.hpp);
  /// 1 = not fitted. sim::ComputeModelOptions::gemm_efficiency_scale.
  double gemm_efficiency_scale = 1;
  /// Op kind (sim calibration op kind: models::OpKind as int, kOpKindOptimizer) -> efficiency.
  std::map<int, double> efficiency;
  /// Op kind -> efficiency of its backward pass (dX and dW products, other loop orders); a kind
  /// not here runs its backward at `efficiency`.
  std::map<int, double> efficiency_backward;
  std::string comm_algorithm = "ring";
  std::string comm_link;
  double comm_latency_s = 0;
  double comm_busbw_bytes_per_s = 0;
  std::vector<FitGroup> fit;
  std::string date;
  json::Json software;
  std::vector<ProfileInput> inputs;
};

json::Json to_json(const Profile& p);
Profile profile_from_json(const json::Json& doc, const std::string& name);
Profile read_profile_file(const std::string& path);
/// Whether the JSON file is a calibration profile ("kind": "trainplan-calibration-profile"),
/// as opposed to a sim::CalibrationTable; throws Error if it is not readable JSON.
bool is_profile_file(const std::string& path);

struct FitOptions {
  /// Every `heldout_every`-th measured point (by a hash of run, rank and task) is held back
  /// from the fit and only scored. >= 2.
  int heldout_every = 4;
  double huber_delta = 0.1;
};

/// Fits a profile: the roofline and collective model from `bench`, the compute efficiencies
/// and kernel overhead from the measured runs' compute tasks (none: the profile carries the
/// roofline only and the simulator's default efficiencies apply). Throws Error when a run was
/// measured on other hardware than the benchmark, or there are fewer points than parameters.
Profile fit_profile(const BenchResult& bench, const std::string& bench_name, const std::vector<MeasuredRun>& runs,
                    const FitOptions& options = {});

/// The device the profile describes, as the simulator's GpuSpec (every precision at the
/// benchmark's matmul peak: the CPU backend computes everything in f32).
hw::GpuSpec device_spec(const Profile& p);
/// Simulator options with the profile applied (calibration table, kernel overhead,
/// communication launch latency) on top of `base`.
sim::SimOptions apply_profile(const Profile& p, sim::SimOptions base);
/// Predicts one step of `program` on the profile's own hardware: its device, a switch of
/// `program.world_size` members at the fitted bus bandwidth.
sim::StepResult predict_on_profile_hardware(const plan::StepProgram& program, const plan::Plan& plan,
                                            const Profile& p);

/// Throws Error (at `file`, "/hardware") when the profile was fitted on other hardware than
/// `hardware` and `allow_other` is false.
void check_profile_applies(const Profile& p, const std::string& hardware, bool allow_other, const std::string& file);

/// The profile directory: $TRAINPLAN_CALIBRATION_DIR, else $XDG_CONFIG_HOME/trainplan/calibration,
/// else ~/.config/trainplan/calibration. The default profile of a hardware is the file
/// <dir>/<hardware with every character outside [A-Za-z0-9._-] as '_'>.json.
std::string profile_directory();
/// Whether $TRAINPLAN_CALIBRATION_DIR is set: then it is the only place defaults come from.
bool profile_directory_is_explicit();
std::string default_profile_path(const std::string& hardware);
/// default_profile_path(hardware) if that file exists; else, unless the directory is explicit,
/// the built-in profile of that hardware; else "".
std::string find_default_profile(const std::string& hardware);

/// The built-in profiles: calibration/profiles/*.json of the source tree, embedded at build
/// time, named "builtin:calibration/profiles/<file>" (read_profile_file and is_profile_file
/// take these names). `scripts/builtin-profiles.sh` makes them with `trainplan calibrate` from
/// the measurements in calibration/data/ (calibration/profiles/README.md); never edited by hand.
std::vector<std::string> builtin_profiles();
/// The built-in profile whose hardware is `hardware`, or "".
std::string find_builtin_profile(const std::string& hardware);

/// The profile key of this machine's CPU: "cpu:" + the model name from /proc/cpuinfo + " (N
/// cpus)", N the CPUs this process may run on (sched_getaffinity).
std::string host_cpu_hardware();

}  // namespace trainplan::calibration
