// `trainplan history [--db PATH] [--hardware H] [--csv FILE]`: the error history
// (calibration/history.hpp): every recorded run with predicted and measured step time, then
// the error trend per hardware (median |error| of the runs recorded under each profile, in
// the order the profiles were first used), and optionally all of it as CSV.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/calibration/history.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::cli {
namespace {

struct HistoryArgs {
  std::string db;
  std::string hardware;
  std::string csv;
};

void run(const HistoryArgs& a) {
  const std::string path = a.db.empty() ? calibration::default_history_path() : a.db;
  calibration::History h(path);
  const auto runs = h.runs(a.hardware);
  std::printf("error history %s (schema %d): %zu run(s)%s\n", path.c_str(), h.schema_version(), runs.size(),
              a.hardware.empty() ? "" : fmt::format(" on {}", a.hardware).c_str());
  if (runs.empty()) {
    std::printf("nothing recorded yet: trainplan execute and trainplan calibrate record their runs here\n");
  } else {
    Table t({">id", "date", "command", "hardware", "plan", "profile", ">predicted", ">measured", ">error"});
    for (const auto& r : runs) {
      const auto e = r.step_error();
      t.add({std::to_string(r.id), r.date, r.command, r.hardware, r.plan, r.profile,
             r.predicted_step_s ? units::format_duration(*r.predicted_step_s) : "-", units::format_duration(r.measured_step_s),
             e ? fmt::format("{:+.1f}%", 100 * *e) : "-"});
    }
    std::fputs(t.render("  ").c_str(), stdout);
    // Trend: per hardware, per profile in order of first use, the median |error|.
    std::map<std::string, std::vector<std::pair<std::string, std::vector<double>>>> trend;
    for (const auto& r : runs) {
      const auto e = r.step_error();
      if (!e) continue;
      auto& list = trend[r.hardware];
      auto it = std::find_if(list.begin(), list.end(), [&](const auto& x) { return x.first == r.profile; });
      if (it == list.end()) list.push_back({r.profile, {}}), it = std::prev(list.end());
      it->second.push_back(std::abs(*e));
    }
    std::printf("\nerror trend per hardware (median |step-time error| per profile, oldest first):\n");
    Table tt({"hardware", "profile", ">runs", ">median |error|", ">worst"});
    for (auto& [hw, list] : trend)
      for (auto& [prof, errs] : list) {
        std::sort(errs.begin(), errs.end());
        const size_t n = errs.size();
        const double med = n % 2 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
        tt.add({hw, prof, std::to_string(n), fmt::format("{:.1f}%", 100 * med), fmt::format("{:.1f}%", 100 * errs.back())});
      }
    std::fputs(tt.render("  ").c_str(), stdout);
  }
  if (!a.csv.empty()) {
    json::write_text_file(a.csv, calibration::history_csv(runs));
    std::printf("CSV: %s\n", a.csv.c_str());
  }
}

}  // namespace

void add_history_command(CLI::App& app) {
  auto a = std::make_shared<HistoryArgs>();
  CLI::App* cmd = app.add_subcommand("history", "Predicted vs measured runs recorded by execute and calibrate; error trend; CSV");
  cmd->add_option("--db", a->db, "History database (default: $TRAINPLAN_HISTORY_DB, else $XDG_DATA_HOME/trainplan/history.sqlite)");
  cmd->add_option("--hardware", a->hardware, "Only runs on this hardware (e.g. \"cpu:...\" or a GPU name)");
  cmd->add_option("--csv", a->csv, "Export the runs and their task-class totals as CSV");
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
