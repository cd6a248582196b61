#include "trainplan/calibration/measurements.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "trainplan/calibration/fit.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::calibration {

json::Json to_json(const BenchResult& b) {
  json::Json doc;
  doc["schema_version"] = b.schema_version;
  doc["kind"] = "trainplan-bench";
  doc["machine"] = b.machine;
  doc["hardware"] = b.hardware;
  doc["backend"] = b.backend;
  doc["device"] = b.device;
  doc["date"] = b.date;
  doc["software"] = b.software.is_null() ? json::Json::object() : b.software;
  doc["warmup"] = b.warmup;
  doc["statistics"] = b.statistics;
  doc["communicator"] = b.communicator;
  json::Json pts = json::Json::array();
  for (const auto& p : b.points) {
    json::Json j;
    j["kind"] = p.kind;
    if (p.m || p.n || p.k) j["m"] = p.m, j["n"] = p.n, j["k"] = p.k;
    if (p.flops > 0) j["flops"] = p.flops;
    if (p.bytes > 0) j["bytes"] = p.bytes;
    j["ranks"] = p.ranks;
    j["median_s"] = p.median_s;
    j["min_s"] = p.min_s;
    j["max_s"] = p.max_s;
    j["mad_s"] = p.mad_s;
    j["repetitions"] = p.repetitions;
    j["outliers"] = p.outliers;
    if (p.kind == "all_reduce") j["algbw_bytes_per_s"] = p.algbw(), j["busbw_bytes_per_s"] = p.busbw();
    if (p.flops > 0 && p.median_s > 0) j["flops_per_s"] = p.flops / p.median_s;
    if (p.kind == "memory" && p.median_s > 0) j["bytes_per_s"] = p.bytes / p.median_s;
    pts.push_back(j);
  }
  doc["points"] = pts;
  return doc;
}

BenchResult bench_from_json(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  BenchResult b;
  b.schema_version = static_cast<int>(r.field("schema_version").as_positive_int());
  if (b.schema_version != kBenchSchemaVersion)
    throw r.field("schema_version")
        .error(fmt::format("bench schema version {} is not supported (this build reads {})", b.schema_version,
                           kBenchSchemaVersion))
        .hint("measure again with this trainplan: trainplan bench -o measurements.json");
  if (r.field("kind").as_string() != "trainplan-bench")
    throw r.field("kind").error("not a trainplan bench file").hint("write one with trainplan bench -o FILE");
  b.machine = r.field("machine").as_string();
  b.hardware = r.field("hardware").as_string();
  b.backend = r.field("backend").as_string();
  b.device = r.field_or("device", "");
  b.date = r.field("date").as_string();
  b.software = r.has("software") ? r.field("software").value() : json::Json::object();
  b.warmup = static_cast<int>(r.int_or("warmup", 0));
  b.statistics = r.field_or("statistics", "");
  b.communicator = r.field_or("communicator", "in-process");
  for (const auto& pr : r.field("points").items()) {
    BenchPoint p;
    p.kind = pr.field("kind").as_choice({"matmul", "attention", "memory", "all_reduce"});
    p.m = pr.int_or("m", 0), p.n = pr.int_or("n", 0), p.k = pr.int_or("k", 0);
    p.flops = pr.number_or("flops", 0);
    p.bytes = pr.number_or("bytes", 0);
    p.ranks = static_cast<int>(pr.int_or("ranks", 1));
    p.median_s = pr.field("median_s").as_positive();
    p.min_s = pr.number_or("min_s", p.median_s);
    p.max_s = pr.number_or("max_s", p.median_s);
    p.mad_s = pr.number_or("mad_s", 0);
    p.repetitions = static_cast<int>(pr.int_or("repetitions", 1));
    p.outliers = static_cast<int>(pr.int_or("outliers", 0));
    for (const char* k : {"algbw_bytes_per_s", "busbw_bytes_per_s", "flops_per_s", "bytes_per_s"}) pr.ignore(k);
    if ((p.kind == "matmul" || p.kind == "attention") && !(p.flops > 0))
      throw pr.error("a " + p.kind + " point needs flops > 0").hint("write the file with trainplan bench");
    if ((p.kind == "memory" || p.kind == "all_reduce") && !(p.bytes > 0))
      throw pr.error("a " + p.kind + " point needs bytes > 0").hint("write the file with trainplan bench");
    pr.finish();
    b.points.push_back(p);
  }
  r.finish();
  return b;
}

BenchResult read_bench_file(const std::string& path) { return bench_from_json(json::parse_file(path), path); }

void summarize_times(std::vector<double> times, BenchPoint& point) {
  TP_ASSERT(!times.empty());
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  point.repetitions = static_cast<int>(times.size());
  point.median_s = median(times);
  point.min_s = *std::min_element(times.begin(), times.end());
  point.max_s = *std::max_element(times.begin(), times.end());
  std::vector<double> dev;
  for (double t : times) dev.push_back(std::abs(t - point.median_s));
  point.mad_s = median(dev);
  point.outliers = static_cast<int>(
      std::count_if(times.begin(), times.end(), [&](double t) { return t > point.median_s + 5 * point.mad_s && point.mad_s > 0; }));
}

Roofline roofline(const BenchResult& b, const std::string& name) {
  Roofline r;
  std::vector<std::vector<double>> X;
  std::vector<double> t;
  for (const auto& p : b.points) {
    if (p.kind == "matmul") r.peak_flops_per_s = std::max(r.peak_flops_per_s, p.flops / p.median_s);
    if (p.kind == "memory") r.memory_bytes_per_s = std::max(r.memory_bytes_per_s, p.bytes / p.median_s);
    if (p.kind == "all_reduce" && p.ranks > 1) {
      X.push_back({1.0, p.bytes * 2.0 * (p.ranks - 1) / p.ranks});
      t.push_back(p.median_s);
    }
  }
  if (!(r.peak_flops_per_s > 0))
    throw Error("the benchmark has no matmul point").at(name, "/points").hint("run trainplan bench without --only");
  if (!(r.memory_bytes_per_s > 0))
    throw Error("the benchmark has no memory point").at(name, "/points").hint("run trainplan bench without --only");
  if (X.size() >= 2) {
    const auto f = fit_log_linear(X, t, {1e-5, 1e-10});
    r.comm_latency_s = f.params[0];
    r.comm_busbw_bytes_per_s = 1.0 / f.params[1];
  }
  return r;
}

namespace {
plan::StepProgram lowered(const plan::Plan& p, const plan::PlanContext& ctx) { return plan::lower(p, ctx); }
}  // namespace

MeasuredRun measured_run(const std::string& name, const plan::Plan& p, const plan::PlanContext& ctx,
                         plan::Timeline timeline) {
  MeasuredRun run;
  run.path = name;
  run.plan = p;
  run.program = lowered(p, ctx);
  run.timeline = std::move(timeline);
  for (const auto& e : run.timeline.events) {
    if (e.rank < 0 || e.rank >= static_cast<int>(run.program.ranks.size()) || e.task < 0 ||
        e.task >= static_cast<int>(run.program.ranks[static_cast<size_t>(e.rank)].tasks.size()))
      throw Error(fmt::format("event of rank {} task {} is not in the plan's program", e.rank, e.task))
          .at(name, "/events")
          .hint("the timeline was measured with another plan or another trainplan version; execute the plan again");
  }
  return run;
}

MeasuredRun read_measured_run(const std::string& path, const hw::Catalog& catalog) {
  const json::Json doc = json::parse_file(path);
  plan::Timeline tl = plan::timeline_from_json(doc, path);
  if (tl.source.rfind("measured", 0) != 0)
    throw Error(fmt::format("the timeline's source is \"{}\", not a measurement", tl.source))
        .at(path, "/source")
        .hint("calibrate from timelines written by trainplan execute --timeline");
  if (!tl.meta.is_object() || !tl.meta.contains("plan_file") || !tl.meta["plan_file"].is_string())
    throw Error("the measured timeline does not name its plan").at(path, "/meta/plan_file")
        .hint("write it with trainplan execute PLAN --timeline FILE (this version records the plan file)");
  std::filesystem::path plan_file = tl.meta["plan_file"].get<std::string>();
  if (plan_file.is_relative()) plan_file = std::filesystem::path(path).parent_path() / plan_file;
  if (!std::filesystem::exists(plan_file))
    throw Error(fmt::format("the plan file {} is gone", plan_file.string()))
        .at(path, "/meta/plan_file")
        .hint("calibrate where the plan the timeline was measured with is still readable");
  plan::Plan p = plan::read_plan_file(plan_file.string());
  plan::PlanContext ctx = plan::resolve(p, catalog, plan_file.string());
  plan::validate(p, ctx, plan_file.string());
  return measured_run(path, p, ctx, std::move(tl));
}

std::string file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read the file").at(path).hint("check the path");
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH64_update(st, buf.data(), static_cast<size_t>(in.gcount()));
  }
  const XXH64_hash_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return fmt::format("{:016x}", static_cast<unsigned long long>(h));
}

std::string utc_now() { return utc_time(std::time(nullptr)); }

std::string utc_time(std::time_t t) {
  const std::time_t now = t;
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace trainplan::calibration
