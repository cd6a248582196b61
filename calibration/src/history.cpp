#include "trainplan/calibration/history.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "trainplan/core/error.hpp"

namespace trainplan::calibration {

std::optional<double> HistoryRun::step_error() const {
  if (!predicted_step_s || !(measured_step_s > 0)) return std::nullopt;
  return (*predicted_step_s - measured_step_s) / measured_step_s;
}

namespace {
std::string task_class(const plan::TimelineEvent& e) {
  if (e.kind == plan::TaskKind::compute) return "compute/" + std::string(plan::phase_name(e.phase));
  if (e.kind == plan::TaskKind::alloc || e.kind == plan::TaskKind::free) return "";
  return "comm/" + std::string(plan::comm_purpose_name(e.purpose));
}
}  // namespace

std::vector<TaskClassTotal> task_class_totals(const plan::Timeline* predicted, const plan::Timeline& measured) {
  std::map<std::string, TaskClassTotal> m;
  auto add = [&](const plan::Timeline& t, bool pred) {
    for (const auto& e : t.events) {
      const std::string c = task_class(e);
      if (c.empty()) continue;
      auto& x = m[c];
      x.task_class = c;
      (pred ? x.predicted_s : x.measured_s) += e.end_s - e.start_s;
    }
  };
  if (predicted) add(*predicted, true);
  add(measured, false);
  std::vector<TaskClassTotal> out;
  for (auto& [k, v] : m) out.push_back(v);
  return out;
}

std::string default_history_path() {
  if (const char* p = std::getenv("TRAINPLAN_HISTORY_DB"); p && *p) return p;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/trainplan/history.sqlite";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/trainplan/history.sqlite";
}

struct History::Db {
  sqlite3* db = nullptr;
  std::string path;
  void exec(const std::string& sql) const {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      throw Error("history database: " + msg).at(path).hint("remove the file to start a new history");
    }
  }
  Error fail(const std::string& what) const {
    return Error(fmt::format("history database: {}: {}", what, sqlite3_errmsg(db))).at(path);
  }
  int user_version() const {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr);
    int v = 0;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
  }
};

namespace {
// Migrations: entry i takes the schema from version i to i + 1.
const char* const kMigrations[] = {
    R"(CREATE TABLE runs(
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         date TEXT NOT NULL, command TEXT NOT NULL, hardware TEXT NOT NULL, backend TEXT NOT NULL,
         plan TEXT NOT NULL, profile TEXT NOT NULL,
         predicted_step_s REAL, measured_step_s REAL NOT NULL,
         predicted_peak_bytes REAL, measured_peak_bytes REAL NOT NULL);
       CREATE TABLE task_classes(
         run_id INTEGER NOT NULL REFERENCES runs(id), task_class TEXT NOT NULL,
         predicted_s REAL NOT NULL, measured_s REAL NOT NULL);
       CREATE INDEX runs_hardware ON runs(hardware);)",
};
static_assert(std::size(kMigrations) == kHistorySchemaVersion);
}  // namespace

History::History(const std::string& path) : db_(std::make_unique<Db>()), path_(path) {
  db_->path = path;
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (sqlite3_open_v2(path.c_str(), &db_->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string msg = db_->db ? sqlite3_errmsg(db_->db) : "out of memory";
    sqlite3_close(db_->db);
    db_->db = nullptr;
    throw Error("cannot open the history database: " + msg)
        .at(path)
        .hint("pass --history-db PATH or set TRAINPLAN_HISTORY_DB to a writable file");
  }
  // The destructor does not run when the constructor throws: close the connection on any
  // error below (a file that is not a database fails at the first statement).
  try {
    sqlite3_busy_timeout(db_->db, 5000);
    const int v = db_->user_version();
    if (v > kHistorySchemaVersion)
      throw Error(fmt::format("the history database has schema version {}, this trainplan reads up to {}", v,
                              kHistorySchemaVersion))
          .at(path)
          .hint("use a newer trainplan, or another database (--history-db)");
    for (int i = v; i < kHistorySchemaVersion; ++i) {
      db_->exec("BEGIN");
      db_->exec(kMigrations[i]);
      db_->exec(fmt::format("PRAGMA user_version = {}", i + 1));
      db_->exec("COMMIT");
    }
  } catch (...) {
    sqlite3_close(db_->db);
    db_->db = nullptr;
    throw;
  }
}

History::~History() {
  if (db_ && db_->db) sqlite3_close(db_->db);
}

int History::schema_version() const { return db_->user_version(); }

int64_t History::record(const HistoryRun& run) {
  db_->exec("BEGIN");
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_->db,
                         "INSERT INTO runs(date, command, hardware, backend, plan, profile, predicted_step_s, "
                         "measured_step_s, predicted_peak_bytes, measured_peak_bytes) VALUES(?,?,?,?,?,?,?,?,?,?)",
                         -1, &st, nullptr) != SQLITE_OK)
    throw db_->fail("prepare");
  int i = 1;
  for (const std::string* s : {&run.date, &run.command, &run.hardware, &run.backend, &run.plan, &run.profile})
    sqlite3_bind_text(st, i++, s->c_str(), -1, SQLITE_TRANSIENT);
  auto bind_opt = [&](const std::optional<double>& v) {
    if (v) sqlite3_bind_double(st, i, *v);
    else sqlite3_bind_null(st, i);
    ++i;
  };
  bind_opt(run.predicted_step_s);
  sqlite3_bind_double(st, i++, run.measured_step_s);
  bind_opt(run.predicted_peak_bytes);
  sqlite3_bind_double(st, i++, run.measured_peak_bytes);
  if (sqlite3_step(st) != SQLITE_DONE) {
    sqlite3_finalize(st);
    throw db_->fail("insert");
  }
  sqlite3_finalize(st);
  const int64_t id = sqlite3_last_insert_rowid(db_->db);
  for (const auto& c : run.task_classes) {
    sqlite3_prepare_v2(db_->db, "INSERT INTO task_classes(run_id, task_class, predicted_s, measured_s) VALUES(?,?,?,?)",
                       -1, &st, nullptr);
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, c.task_class.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, c.predicted_s);
    sqlite3_bind_double(st, 4, c.measured_s);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) throw db_->fail("insert task class");
  }
  db_->exec("COMMIT");
  return id;
}

std::vector<HistoryRun> History::runs(const std::string& hardware) const {
  std::vector<HistoryRun> out;
  sqlite3_stmt* st = nullptr;
  const std::string sql =
      "SELECT id, date, command, hardware, backend, plan, profile, predicted_step_s, measured_step_s, "
      "predicted_peak_bytes, measured_peak_bytes FROM runs" +
      std::string(hardware.empty() ? "" : " WHERE hardware = ?") + " ORDER BY id";
  if (sqlite3_prepare_v2(db_->db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) throw db_->fail("query");
  if (!hardware.empty()) sqlite3_bind_text(st, 1, hardware.c_str(), -1, SQLITE_TRANSIENT);
  auto text = [&](int c) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, c))); };
  auto opt = [&](int c) {
    return sqlite3_column_type(st, c) == SQLITE_NULL ? std::nullopt : std::optional<double>(sqlite3_column_double(st, c));
  };
  while (sqlite3_step(st) == SQLITE_ROW) {
    HistoryRun r;
    r.id = sqlite3_column_int64(st, 0);
    r.date = text(1), r.command = text(2), r.hardware = text(3), r.backend = text(4), r.plan = text(5), r.profile = text(6);
    r.predicted_step_s = opt(7);
    r.measured_step_s = sqlite3_column_double(st, 8);
    r.predicted_peak_bytes = opt(9);
    r.measured_peak_bytes = sqlite3_column_double(st, 10);
    out.push_back(r);
  }
  sqlite3_finalize(st);
  for (auto& r : out) {
    sqlite3_prepare_v2(db_->db, "SELECT task_class, predicted_s, measured_s FROM task_classes WHERE run_id = ? ORDER BY rowid",
                       -1, &st, nullptr);
    sqlite3_bind_int64(st, 1, r.id);
    while (sqlite3_step(st) == SQLITE_ROW)
      r.task_classes.push_back({text(0), sqlite3_column_double(st, 1), sqlite3_column_double(st, 2)});
    sqlite3_finalize(st);
  }
  return out;
}

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
std::string opt_num(const std::optional<double>& v) { return v ? fmt::format("{:.9g}", *v) : ""; }
}  // namespace

std::string history_csv(const std::vector<HistoryRun>& runs) {
  std::string out = "id,date,command,hardware,backend,plan,profile,task_class,predicted_s,measured_s,error,"
                    "predicted_peak_bytes,measured_peak_bytes\n";
  for (const auto& r : runs) {
    const std::string head = fmt::format("{},{},{},{},{},{},{},", r.id, csv_field(r.date), csv_field(r.command),
                                         csv_field(r.hardware), csv_field(r.backend), csv_field(r.plan), csv_field(r.profile));
    const auto err = r.step_error();
    out += head + fmt::format(",{},{:.9g},{},{},{:.9g}\n", opt_num(r.predicted_step_s), r.measured_step_s, opt_num(err),
                              opt_num(r.predicted_peak_bytes), r.measured_peak_bytes);
    for (const auto& c : r.task_classes)
      out += head + fmt::format("{},{:.9g},{:.9g},{},,\n", csv_field(c.task_class), c.predicted_s, c.measured_s,
                                c.measured_s > 0 ? fmt::format("{:.9g}", (c.predicted_s - c.measured_s) / c.measured_s) : "");
  }
  return out;
}

}  // namespace trainplan::calibration
