// File: trainplan/calibration/nccl_tests.hpp
//
// nccl-tests logs as `all_reduce_perf` prints them (github.com/NVIDIA/nccl-tests), read as
// calibration input: the ranks and devices from the "# Rank N ... device D [bus] NAME" lines,
// and one point per data row with the out-of-place time, algbw and busbw
// (`trainplan calibrate run.log ...`). Row layout, from the right so that versions with and
// without the `root` column both read: ... time algbw busbw #wrong | time algbw busbw #wrong
// (out-of-place | in-place). A log of another collective is refused: the busbw / algbw ratio
// of an all-reduce is 2 (n - 1) / n (nccl-tests' PERFORMANCE.md).
//
//   const auto log = calibration::read_nccl_tests_log("all_reduce_8gpu.log");
//   calibration::fit_nccl_tests(profile, {log});   // the profile's collective latency and busbw
#pragma once

#include <string>
#include <vector>

#include "trainplan/calibration/measurements.hpp"
#include "trainplan/calibration/profile.hpp"

namespace trainplan::calibration {

/// At most this many data rows per log (nccl-tests prints one per size: ~30 for 8 B .. 8 GiB).
inline constexpr size_t kMaxNcclTestsRows = 10000;

struct NcclTestsLog {
  std::string path;
  int ranks = 0;
  std::vector<std::string> devices;  // per rank, as the log names them ("NVIDIA A100-SXM4-40GB")
  std::string nccl_version;          // from a "NCCL version ..." line, if any
  /// kind "all_reduce", bytes = size per rank, ranks, median_s = min_s = max_s = the
  /// out-of-place time, repetitions = 1 (nccl-tests prints a mean over its iterations).
  std::vector<BenchPoint> points;
};

/// Whether the text reads like nccl-tests output (its "# nThread" preamble or its column header).
bool is_nccl_tests_log(const std::string& text);
/// Throws Error naming `name`, the line and a fix for rows that do not parse, a log without
/// rows or ranks, or one of another collective.
NcclTestsLog parse_nccl_tests_log(const std::string& text, const std::string& name);
NcclTestsLog read_nccl_tests_log(const std::string& path);

/// Fits the profile's collective model to the logs' points: time = latency + bytes x 2 (n - 1) /
/// n / busbw by robust least squares on log time (alternate points held back and scored);
/// sets comm_algorithm "nccl", comm_link "nccl-tests, N ranks", the latency and busbw, and a
/// fit group. All logs must have the same rank count.
void fit_nccl_tests(Profile& profile, const std::vector<NcclTestsLog>& logs, const FitOptions& options = {});

/// A profile of a catalog GPU without a benchmark: its device is the catalog's dense bf16 (else
/// fp16, else fp32) peak and HBM bandwidth; backend "cuda".
Profile catalog_gpu_profile(const hw::GpuSpec& gpu);

}  // namespace trainplan::calibration
