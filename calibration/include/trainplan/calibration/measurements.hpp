// File: trainplan/calibration/measurements.hpp
//
// What `trainplan bench` writes and `trainplan calibrate` reads: microbenchmark points of one
// machine (matrix products, attention, memory-bound passes, collectives), and measured runs
// (a plan's measured Timeline from `trainplan execute --timeline`, lowered again to its
// StepProgram so every measured task has its op costs).
//
//   calibration::BenchResult b = calibration::read_bench_file("measurements.json");
//   calibration::MeasuredRun r = calibration::read_measured_run("a1.timeline.json", catalog);
//
// Statistics of one point: `repetitions` timed runs after `warmup` untimed ones; the point's
// time is the median (robust to a preempted repetition); `mad_s` is the median absolute
// deviation, and repetitions more than 5 MADs above the median are counted as outliers (kept
// out of nothing: the median already ignores them; the count says how noisy the machine was).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/plan/timeline.hpp"

namespace trainplan::calibration {

inline constexpr int kBenchSchemaVersion = 1;

/// One microbenchmark point. kind: "matmul" (forward linear, m x k times k x n), "attention"
/// (forward, batch*heads x seq x head_dim), "memory" (elementwise add of `bytes` read+written),
/// "all_reduce" (over `ranks` ranks of the communicator, `bytes` per rank).
struct BenchPoint {
  std::string kind;
  int64_t m = 0, n = 0, k = 0;  // matmul shape; attention: m = batch*heads, n = seq, k = head_dim
  double flops = 0;             // per repetition
  double bytes = 0;             // memory: read + written; all_reduce: message size per rank
  int ranks = 1;
  double median_s = 0, min_s = 0, max_s = 0, mad_s = 0;
  int repetitions = 0;
  int outliers = 0;  // repetitions above median + 5 MAD
  /// all_reduce: algbw = bytes / t, busbw = algbw * 2 (n - 1) / n (nccl-tests' PERFORMANCE.md).
  double algbw() const { return median_s > 0 ? bytes / median_s : 0; }
  double busbw() const { return ranks > 1 ? algbw() * 2.0 * (ranks - 1) / ranks : algbw(); }
};

struct BenchResult {
  int schema_version = kBenchSchemaVersion;
  std::string machine;       // host name + CPU model (or GPU name)
  std::string hardware;      // the profile key: "cpu:<CPU model>" or the catalog GPU name
  std::string backend;       // executor backend
  std::string device;        // backend description
  std::string date;          // ISO 8601 UTC
  json::Json software;       // library versions, compiler
  int warmup = 0;
  std::string statistics;    // how points are summarized (median, MAD, outliers)
  /// What the all-reduce points ran over: "in-process" (ranks as threads) or "tcp" (one
  /// process per rank, `bench` under a launcher).
  std::string communicator = "in-process";
  std::vector<BenchPoint> points;
};

json::Json to_json(const BenchResult& b);
BenchResult bench_from_json(const json::Json& doc, const std::string& name);
BenchResult read_bench_file(const std::string& path);

/// Median, MAD and outlier count of repeated timings (seconds); `times` must not be empty.
void summarize_times(std::vector<double> times, BenchPoint& point);

/// Roofline of the machine from its benchmark: best matmul FLOP/s and best memory-bound
/// bytes/s; collective latency (s) and bus bandwidth (bytes/s) by a robust fit of
/// t = latency + bytes * 2 (n - 1) / n / busbw over the all_reduce points.
struct Roofline {
  double peak_flops_per_s = 0;
  double memory_bytes_per_s = 0;
  double comm_latency_s = 0;
  double comm_busbw_bytes_per_s = 0;
};
/// Throws Error (naming `name`) when there is no matmul or memory point.
Roofline roofline(const BenchResult& b, const std::string& name);

/// A measured step: the Timeline from `trainplan execute --timeline` (its meta names the plan
/// file) and the plan's StepProgram lowered again, so each event's task has its op costs.
struct MeasuredRun {
  std::string path;
  plan::Plan plan;
  plan::StepProgram program;
  plan::Timeline timeline;
};
/// Reads a measured timeline; its meta must hold "plan_file" (absolute or relative to the
/// timeline) and "source" must be "measured". Throws Error naming the file and pointer.
MeasuredRun read_measured_run(const std::string& path, const hw::Catalog& catalog);
/// Same from a timeline in memory and a plan already resolved (tests, the loop bench).
MeasuredRun measured_run(const std::string& name, const plan::Plan& p, const plan::PlanContext& ctx,
                         plan::Timeline timeline);

/// xxh64 of a file's bytes as 16 hex digits (libxxhash); throws Error if unreadable.
std::string file_xxh64(const std::string& path);
/// Current UTC time as ISO 8601 ("2026-11-25T22:15:03Z").
std::string utc_now();
/// ISO 8601 UTC of a time (utc_now is utc_time(now)).
std::string utc_time(std::time_t t);

}  // namespace trainplan::calibration
