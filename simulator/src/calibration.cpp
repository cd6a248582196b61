// Calibration table: measured efficiencies by op kind and GEMM shape bucket, JSON in and out.
#include <cmath>
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/simulator/compute_model.hpp"

namespace trainplan::sim {
namespace {

constexpr int kCalibrationSchema = 1;
constexpr int kLastOpKind = static_cast<int>(models::OpKind::loss);

}  // namespace

int shape_bucket(int64_t x) {
  if (x <= 0) return -1;
  int b = 0;
  while (x > 1) x >>= 1, ++b;
  return b;
}

std::string calibration_op_kind_name(int op_kind) {
  if (op_kind == kOpKindAny) return "any";
  if (op_kind == kOpKindOptimizer) return "optimizer";
  TP_ASSERT(op_kind >= 0 && op_kind <= kLastOpKind);
  return std::string(models::op_kind_name(static_cast<models::OpKind>(op_kind)));
}

std::vector<std::string> calibration_op_kind_names() {
  std::vector<std::string> names;
  for (int k = 0; k <= kLastOpKind; ++k) names.push_back(calibration_op_kind_name(k));
  names.push_back("optimizer");
  names.push_back("any");
  return names;
}

std::optional<int> parse_calibration_op_kind(std::string_view name) {
  if (name == "any") return kOpKindAny;
  if (name == "optimizer") return kOpKindOptimizer;
  for (int k = 0; k <= kLastOpKind; ++k)
    if (calibration_op_kind_name(k) == name) return k;
  return std::nullopt;
}

void CalibrationTable::add(const CalibrationEntry& e) {
  const int numbers = (e.compute_efficiency ? 1 : 0) + (e.memory_efficiency ? 1 : 0) + (e.duration_s ? 1 : 0);
  if (numbers != 1)
    throw Error("a calibration entry needs exactly one of compute_efficiency, memory_efficiency, duration_s");
  if (e.op_kind != kOpKindAny && e.op_kind != kOpKindOptimizer && (e.op_kind < 0 || e.op_kind > kLastOpKind))
    throw Error("unknown op kind " + std::to_string(e.op_kind));
  const bool has_shape = e.m > 0 || e.n > 0 || e.k > 0;
  if (has_shape && !(e.m > 0 && e.n > 0 && e.k > 0))
    throw Error("a calibration shape needs m, n and k all positive");
  for (const auto& eff : {e.compute_efficiency, e.memory_efficiency})
    if (eff && !(*eff > 0 && *eff <= 1)) throw Error("efficiency must be in (0, 1], got " + std::to_string(*eff));
  if (e.duration_s) {
    if (!(*e.duration_s > 0)) throw Error("duration_s must be positive, got " + std::to_string(*e.duration_s));
    if (!has_shape) throw Error("duration_s needs the GEMM shape (m, n, k) it was measured at");
  }
  entries_.push_back(e);
  if (e.phase != kPhaseAny && e.phase != kPhaseForward && e.phase != kPhaseBackward)
    throw Error("unknown calibration phase " + std::to_string(e.phase));
  Key key{e.op_kind, shape_bucket(e.m), shape_bucket(e.n), shape_bucket(e.k), e.phase};
  Cell& cell = cells_[key];
  if (e.compute_efficiency) cell.compute.add(*e.compute_efficiency);
  if (e.memory_efficiency) cell.memory.add(*e.memory_efficiency);
  if (e.duration_s)
    cell.achieved.add(2.0 * static_cast<double>(e.m) * static_cast<double>(e.n) * static_cast<double>(e.k) / *e.duration_s);
}

CalibrationLookup CalibrationTable::find(int op_kind, int64_t m, int64_t n, int64_t k, int phase) const {
  CalibrationLookup out;
  const int bm = shape_bucket(m), bn = shape_bucket(n), bk = shape_bucket(k);
  const Key keys[] = {{op_kind, bm, bn, bk, phase},
                      {op_kind, bm, bn, bk, kPhaseAny},
                      {op_kind, -1, -1, -1, phase},
                      {op_kind, -1, -1, -1, kPhaseAny},
                      {kOpKindAny, -1, -1, -1, kPhaseAny}};
  for (const Key& key : keys) {
    auto it = cells_.find(key);
    if (it == cells_.end()) continue;
    if (!out.compute_efficiency && !out.achieved_flops_per_s) {
      out.compute_efficiency = it->second.compute.value();
      out.achieved_flops_per_s = it->second.achieved.value();
    }
    if (!out.memory_efficiency) out.memory_efficiency = it->second.memory.value();
  }
  return out;
}

CalibrationTable CalibrationTable::from_json(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  CalibrationTable t;
  int64_t schema = r.field("schema_version").as_int();
  if (schema != kCalibrationSchema)
    throw r.field("schema_version").error("unsupported schema_version " + std::to_string(schema))
        .hint("this build reads calibration tables of schema_version 1");
  t.gpu = r.field_or("gpu", "");
  if (auto p = r.optional_field("precision")) {
    std::string s = p->as_choice(precision_names());
    t.precision = parse_precision(s);
  }
  t.source = r.field_or("source", "");
  for (const json::Reader& er : r.field("entries").items()) {
    CalibrationEntry e;
    std::string kind = er.field("op_kind").as_choice(calibration_op_kind_names());
    e.op_kind = *parse_calibration_op_kind(kind);
    if (er.has("m") || er.has("n") || er.has("k")) {
      e.m = er.field("m").as_positive_int();
      e.n = er.field("n").as_positive_int();
      e.k = er.field("k").as_positive_int();
    }
    if (auto v = er.optional_field("phase"))
      e.phase = v->as_choice({"forward", "backward"}) == "forward" ? kPhaseForward : kPhaseBackward;
    if (auto v = er.optional_field("compute_efficiency")) e.compute_efficiency = v->as_positive(10.0);
    if (auto v = er.optional_field("memory_efficiency")) e.memory_efficiency = v->as_positive(10.0);
    if (auto v = er.optional_field("duration_s")) e.duration_s = v->as_quantity(units::Dimension::duration);
    er.ignore("note");
    er.finish();
    try {
      t.add(e);
    } catch (Error& err) {
      throw err.at(name, er.pointer());
    }
  }
  r.finish();
  return t;
}

CalibrationTable CalibrationTable::read_file(const std::string& path) {
  return from_json(json::parse_file(path), path);
}

json::Json CalibrationTable::to_json() const {
  json::Json doc;
  doc["schema_version"] = kCalibrationSchema;
  if (!gpu.empty()) doc["gpu"] = gpu;
  if (precision) doc["precision"] = std::string(precision_name(*precision));
  if (!source.empty()) doc["source"] = source;
  json::Json entries = json::Json::array();
  for (const CalibrationEntry& e : entries_) {
    json::Json j;
    j["op_kind"] = calibration_op_kind_name(e.op_kind);
    if (e.m > 0) {
      j["m"] = e.m;
      j["n"] = e.n;
      j["k"] = e.k;
    }
    if (e.phase != kPhaseAny) j["phase"] = e.phase == kPhaseForward ? "forward" : "backward";
    if (e.compute_efficiency) j["compute_efficiency"] = *e.compute_efficiency;
    if (e.memory_efficiency) j["memory_efficiency"] = *e.memory_efficiency;
    if (e.duration_s) j["duration_s"] = *e.duration_s;
    entries.push_back(std::move(j));
  }
  doc["entries"] = std::move(entries);
  return doc;
}

}  // namespace trainplan::sim
