// File: trainplan/calibration/history.hpp
//
// The error history: every `trainplan calibrate` and every `trainplan execute` records what
// was predicted next to what was measured (step time, per task-class totals, peak memory, the
// profile used) in an SQLite database (Debian's libsqlite3). `trainplan history` lists the
// runs, the error trend per hardware, and exports CSV.
//
//   calibration::History h(calibration::default_history_path());
//   h.record(run);                       // run.id is set
//   for (const auto& r : h.runs()) ...
//
// Default path: $TRAINPLAN_HISTORY_DB, else $XDG_DATA_HOME/trainplan/history.sqlite, else
// ~/.local/share/trainplan/history.sqlite. The schema is versioned (PRAGMA user_version);
// opening a database of an older version runs the migrations in order, one of a newer
// version is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/plan/timeline.hpp"

namespace trainplan::calibration {

inline constexpr int kHistorySchemaVersion = 1;

struct TaskClassTotal {
  std::string task_class;  // "compute/forward", "compute/backward", "compute/optimizer", "comm/dp", ...
  double predicted_s = 0;  // summed over ranks
  double measured_s = 0;
};

struct HistoryRun {
  int64_t id = 0;
  std::string date;      // ISO 8601 UTC
  std::string command;   // "execute" or "calibrate"
  std::string hardware;
  std::string backend;
  std::string plan;      // plan file
  std::string profile;   // profile used for the prediction, or "uncalibrated"
  std::optional<double> predicted_step_s;
  double measured_step_s = 0;
  std::optional<double> predicted_peak_bytes;  // max over ranks
  double measured_peak_bytes = 0;
  std::vector<TaskClassTotal> task_classes;
  /// (predicted - measured) / measured; nullopt without a prediction.
  std::optional<double> step_error() const;
};

/// Per task class, summed durations of a predicted and a measured timeline of one program
/// (classes present in either).
std::vector<TaskClassTotal> task_class_totals(const plan::Timeline* predicted, const plan::Timeline& measured);

std::string default_history_path();

class History {
 public:
  /// Opens (creating folders and the file) and migrates; throws Error naming the path.
  explicit History(const std::string& path);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  int64_t record(const HistoryRun& run);
  /// Runs in insertion order, optionally of one hardware only.
  std::vector<HistoryRun> runs(const std::string& hardware = {}) const;
  int schema_version() const;
  const std::string& path() const { return path_; }

 private:
  struct Db;
  std::unique_ptr<Db> db_;
  std::string path_;
};

/// CSV: one row per run and task class ("" for the step row), header first.
std::string history_csv(const std::vector<HistoryRun>& runs);

}  // namespace trainplan::calibration
