// File: trainplan/plan/timeline.hpp
//
// Timeline: what happened (measured) or will happen (predicted) in one step of a
// StepProgram: per rank, per task, start and end. The simulator and the executor write the
// same format, so two timelines of one program compare task by task.
//
//   plan::Timeline t = simulate_step(...);      // or executor::run(...)
//   plan::write_timeline_file("step.json", t);
//   plan::write_chrome_trace_file("step.trace.json", t);  // open in ui.perfetto.dev
//
// Times are seconds from the start of the step.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::plan {

struct TimelineEvent {
  int rank = 0;
  int task = 0;            // task id in the rank's program
  int stream = 0;
  TaskKind kind = TaskKind::compute;
  double start_s = 0;
  double end_s = 0;
  double bytes = 0;
  double flops = 0;
  std::string label;
  Phase phase = Phase::none;
  CommPurpose purpose = CommPurpose::none;
};

/// Rank `rank` ran exactly the events of rank `source` (same tasks, same times): a simulator
/// with symmetric fidelity records a class's events once and names the other members here.
struct RankAlias {
  int rank = 0;
  int source = 0;
};

struct Timeline {
  std::string source;      // "predicted" (simulator) or "measured" (executor, backend name)
  double step_time_s = 0;
  std::vector<std::string> streams;
  std::vector<TimelineEvent> events;   // sorted by (rank, task)
  /// Ranks whose events are another rank's (ascending rank; `source` has its events in
  /// `events`). The writers and for_each_event expand them; most producers leave this empty.
  std::vector<RankAlias> aliases;
  std::vector<double> peak_memory_bytes;  // per rank
  json::Json meta;         // plan summary, options, device
};

/// Every event in (rank, task) order, aliased ranks included as renamed copies: what the
/// timeline means, without materializing the copies.
void for_each_event(const Timeline& timeline, const std::function<void(const TimelineEvent&)>& fn);

json::Json to_json(const Timeline& timeline);
Timeline timeline_from_json(const json::Json& doc, const std::string& name);
void write_timeline_file(const std::string& path, const Timeline& timeline);
Timeline read_timeline_file(const std::string& path);

/// Chrome trace event format (JSON object with "traceEvents"): one process per rank, one
/// thread per stream, complete events ("ph": "X") in microseconds, with bytes/FLOPs as args.
json::Json chrome_trace(const Timeline& timeline);
void write_chrome_trace_file(const std::string& path, const Timeline& timeline);

}  // namespace trainplan::plan
