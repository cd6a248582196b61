// calibration: the error history (SQLite) in a temporary file: schema version and migration,
// records read back, CSV, and a database of a newer schema refused.
#include <sqlite3.h>

#include <filesystem>
#include <random>

#include "test_support.hpp"
#include "trainplan/calibration/history.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"

using namespace trainplan;

namespace {
std::string temp_db(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("trainplan-history-" + tag + "-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  return (dir / "sub" / "history.sqlite").string();  // a folder that does not exist yet
}
}  // namespace

TEST_CASE("calibration: history records runs and reads them back in order", "[calibration][history]") {
  const std::string path = temp_db("rw");
  {
    calibration::History h(path);
    CHECK(h.schema_version() == calibration::kHistorySchemaVersion);
    calibration::HistoryRun r;
    r.date = "2026-11-25T22:00:00Z", r.command = "execute", r.hardware = "cpu:Test", r.backend = "cpu";
    r.plan = "plan, with comma.json", r.profile = "uncalibrated", r.measured_step_s = 0.5, r.measured_peak_bytes = 1e6;
    r.task_classes = {{"compute/forward", 0, 0.2}};
    CHECK(h.record(r) == 1);
    r.command = "calibrate", r.profile = "p.json", r.predicted_step_s = 0.55, r.predicted_peak_bytes = 2e6;
    CHECK(h.record(r) == 2);
    r.hardware = "cpu:Other";
    h.record(r);
  }
  calibration::History h(path);  // reopening migrates nothing and keeps the rows
  const auto all = h.runs();
  REQUIRE(all.size() == 3);
  CHECK_FALSE(all[0].predicted_step_s.has_value());
  CHECK_FALSE(all[0].step_error().has_value());
  CHECK(*all[1].step_error() == Approx(0.1));
  REQUIRE(all[1].task_classes.size() == 1);
  CHECK(all[1].task_classes[0].measured_s == Approx(0.2));
  CHECK(h.runs("cpu:Other").size() == 1);
  const std::string csv = calibration::history_csv(all);
  CHECK_THAT(csv, Catch::StartsWith("id,date,command,hardware,backend,plan,profile,task_class"));
  CHECK_THAT(csv, Catch::Contains("\"plan, with comma.json\""));
  CHECK_THAT(csv, Catch::Contains(",0.55,0.5,0.1,"));
  std::filesystem::remove_all(std::filesystem::path(path).parent_path().parent_path());
}

TEST_CASE("calibration: history refuses a database of a newer schema, and a file that is not one", "[calibration][history]") {
  const std::string path = temp_db("new");
  { calibration::History h(path); }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK_THROWS_WITH(calibration::History(path), Catch::Contains("schema version 99"));
  const std::string junk = std::filesystem::path(path).parent_path() / "junk.sqlite";
  json::write_text_file(junk, std::string(200, 'x'));
  CHECK_THROWS_AS(calibration::History(junk), Error);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path().parent_path());
}

TEST_CASE("calibration: task-class totals sum the durations per phase and purpose", "[calibration][history]") {
  plan::Timeline m, p;
  plan::TimelineEvent e;
  e.kind = plan::TaskKind::compute, e.phase = plan::Phase::forward, e.start_s = 0, e.end_s = 2;
  m.events.push_back(e);
  e.start_s = 3, e.end_s = 4;
  m.events.push_back(e);
  p.events.push_back(e);
  e.kind = plan::TaskKind::collective, e.purpose = plan::CommPurpose::dp, e.start_s = 0, e.end_s = 0.5;
  m.events.push_back(e);
  e.kind = plan::TaskKind::alloc;
  m.events.push_back(e);
  const auto t = calibration::task_class_totals(&p, m);
  REQUIRE(t.size() == 2);
  CHECK(t[0].task_class == "comm/dp");
  CHECK(t[0].measured_s == Approx(0.5));
  CHECK(t[1].task_class == "compute/forward");
  CHECK(t[1].measured_s == Approx(3));
  CHECK(t[1].predicted_s == Approx(1));
}
