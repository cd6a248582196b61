// Validation against published measurements: mapping, FLOP-convention conversions, errors.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <tuple>

#include "test_support.hpp"
#include "trainplan/calibration/validate.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

using namespace trainplan;

namespace {
const calibration::ValidationPoint& point(const calibration::ValidationReport& r, const std::string& id) {
  for (const auto& p : r.points)
    if (p.id == id) return p;
  FAIL("no point " << id);
  return r.points.front();
}
// Whether one of the point's listed assumptions contains `text`.
bool assumes(const calibration::ValidationPoint& p, const std::string& text) {
  return std::any_of(p.assumptions.begin(), p.assumptions.end(), [&](const std::string& a) { return a.find(text) != std::string::npos; });
}
// The mini file and one of its points, which tests vary.
json::Json mini_doc() { return json::parse_file(testing::source_path("tests/calibration/data/published-mini.json")); }
json::Json mini_point(const json::Json& doc, const std::string& id) {
  for (const auto& p : doc["data_points"])
    if (p["id"] == id) return p;
  FAIL("no mini point " << id);
  return {};
}
// A copy of `base` as one 64-GPU H100 run of `model` (8 x 400 Gb/s NDR between nodes), batch 64.
json::Json h100_run(const json::Json& base, const char* id, const json::Json& model, int tp, int pp, int dp) {
  json::Json q = base;
  q["id"] = id;
  q["model"] = model;
  q["hardware"] = {{"gpu", "H100-SXM5-80GB"}, {"inter_node", "8x 400 Gb/s NDR"}, {"num_gpus", 64}};
  q["parallelism"] = {{"global_batch", 64}, {"micro_batch", 1}, {"tp", tp}, {"pp", pp}, {"dp", dp}};
  return q;
}
}  // namespace

TEST_CASE("validate: published TFLOP/s are converted back to a step time with the source's FLOP formula", "[calibration]") {
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin(),
                                             {.threads = 2});
  const auto& n = point(r, "mini-narayanan-1.7B");
  REQUIRE(n.mapped);
  // F = 96 B s l h^2 (1 + s/6h + V/16lh); step = F / (137 TFLOP/s x 32 GPUs).
  const double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
  const double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  CHECK(n.measured == Approx(F / (137e12 * 32)));
  CHECK(n.cluster == "4 x dgx-a100-80gb");
  CHECK(n.error == Approx(n.predicted / n.measured - 1));
  CHECK(n.predicted > 0);
  const auto& m = point(r, "mini-mosaic-125m");
  REQUIRE(m.mapped);
  CHECK(m.measured == Approx(256.0 * 2048 / 1e6));  // global batch tokens / tokens per second
  CHECK(m.setup.find("zero3") != std::string::npos);
  CHECK(m.setup.find("flash") != std::string::npos);
}

TEST_CASE("validate: points that cannot be mapped say why", "[calibration]") {
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  CHECK(point(r, "mini-claim").reason.find("vendor_claim") != std::string::npos);
  CHECK(r.training.points == 4);
  CHECK(r.training.unmapped == 0);  // the vendor claim is neither a training nor a collective point
}

TEST_CASE("validate: a context-parallel point maps onto a plan with cp, its published dp excluding cp", "[calibration]") {
  // NeMo's Llama 3 8B recipe on 8 H100: tp 1, pp 1, cp 2, dp 4 (Megatron's data-parallel size
  // leaves the cp ranks out: 8 GPUs = dp 4 x cp 2).
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  const auto& c = point(r, "mini-cp");
  REQUIRE(c.mapped);
  CHECK(c.cluster == "1 x dgx-h100");
  CHECK(c.setup.find("tp1 pp1 cp2 dp4") != std::string::npos);
  CHECK(c.measured == Approx(12.9));
  CHECK(c.predicted > 0);
  CHECK(c.error == Approx(c.predicted / c.measured - 1));
}

TEST_CASE("validate: a one-node all-reduce is predicted at the NVSwitch bus bandwidth", "[calibration]") {
  // Ring all-reduce of S over 8 GPUs on NVSwitch at B per direction: busbw = 2(n-1)/n S / t -> B
  // for large S (the link bandwidth, 450 GB/s on DGX H100), minus latency.
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  const auto& c = point(r, "mini-nccl-1n");
  REQUIRE(c.mapped);
  CHECK(c.metric == "busbw_GBps");
  CHECK(c.predicted == Approx(450.0).epsilon(0.01));
  CHECK(c.error == Approx(450.0 / 480.0 - 1).epsilon(0.02));
  CHECK(r.collectives.points == 1);
  CHECK(r.collectives.mape == Approx(std::fabs(c.error)));
}

TEST_CASE("validate: a value its source calls a lower or upper bound is checked as one, outside MAPE and bias", "[calibration]") {
  // NVIDIA/nccl#527's note on p4d all-reduce: "treat 3-4 node values as lower bounds". The note
  // sits on all four points; it bounds the 3- and 4-node values only.
  auto with = [](int gpus, const std::string& note) {
    json::Json p = {{"id", "x"}, {"hardware", {{"num_gpus", gpus}, {"gpus_per_node", 8}}}, {"notes", json::Json::array({note})}};
    return calibration::published_bound(p);
  };
  const std::string nccl527 = "reporter considered multi-node numbers too slow (likely misconfigured) - treat 3-4 node values as lower bounds";
  CHECK(with(8, nccl527) == calibration::PublishedBound::none);
  CHECK(with(16, nccl527) == calibration::PublishedBound::none);
  CHECK(with(24, nccl527) == calibration::PublishedBound::lower);
  CHECK(with(32, nccl527) == calibration::PublishedBound::lower);
  CHECK(with(40, nccl527) == calibration::PublishedBound::none);
  CHECK(with(16, "the 2-node value is an upper bound") == calibration::PublishedBound::upper);
  CHECK(with(8, "the 2-node value is an upper bound") == calibration::PublishedBound::none);
  CHECK(with(8, "Upper-bound estimate from the vendor's slide") == calibration::PublishedBound::upper);
  CHECK(with(8, "'busbw of ~200 GB/s' as stated by reporter (approximate)") == calibration::PublishedBound::none);
  CHECK(calibration::published_bound(json::Json{{"id", "no notes"}}) == calibration::PublishedBound::none);
  // Hostile notes: a node count no integer holds, a note of a megabyte: read, never a crash.
  CHECK(with(24, "treat 99999999999999999999999-4 node values as lower bounds") == calibration::PublishedBound::none);
  CHECK(with(24, std::string(1 << 20, '7') + " node values as lower bounds") == calibration::PublishedBound::none);
  // No node count: a scoped note cannot apply.
  CHECK(calibration::published_bound(json::Json{{"notes", json::Json::array({nccl527})}}) == calibration::PublishedBound::none);

  // Scored: the measured point alone makes MAPE and bias; the bound point is counted apart, its
  // side checked. A lower bound on busbw far below the NVSwitch rate holds; one far above fails.
  auto doc = mini_doc();
  json::Json q = mini_point(doc, "mini-nccl-1n");
  json::Json low = q, high = q;
  low["id"] = "bound-low";
  low["notes"] = json::Json::array({"a lower bound: the run was misconfigured"});
  low["metrics"]["other"]["busbw_GBps"] = 100.0;
  high["id"] = "bound-high";
  high["notes"] = json::Json::array({"lower bound"});
  high["metrics"]["other"]["busbw_GBps"] = 900.0;
  doc["data_points"] = json::Json::array({q, low, high});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& m = point(r, "mini-nccl-1n");
  CHECK(m.bound == calibration::PublishedBound::none);
  CHECK(point(r, "bound-low").bound == calibration::PublishedBound::lower);
  CHECK(point(r, "bound-low").bound_consistent);
  CHECK_FALSE(point(r, "bound-high").bound_consistent);
  CHECK(r.collectives.points == 1);
  CHECK(r.collectives.mape == Approx(std::fabs(m.error)));
  CHECK(r.collectives.mean_error == Approx(m.error));
  CHECK(r.collectives.bounds == 2);
  CHECK(r.collectives.bounds_consistent == 1);
  const auto j = calibration::to_json(r);
  CHECK(j["collectives"]["bounds"]["points"] == 2);
  for (const auto& p : j["points"])
    if (p["id"] == "bound-low") CHECK(p["bound"] == "lower");
}

TEST_CASE("validate: unstated recomputation is the least that fits, and Megatron-LM before 2021 ran a rank's batch in one pass",
          "[calibration]") {
  // A Megatron-LM v1-style point: GPT 1.2B (24 x 1536, seq 1024) on one A100 40 GB, 16 sequences
  // per step, no micro-batch and no recomputation stated (NVIDIA/Megatron-LM images/tables.tex).
  auto doc = mini_doc();
  json::Json q = mini_point(doc, "mini-narayanan-1.7B");
  q["id"] = "v1";
  q["source"] = {{"title", "NVIDIA/Megatron-LM images/tables.tex (miniature)"}, {"date", "2020-09"}};
  q["model"] = {{"name", "GPT-2-style 1.2B"}, {"layers", 24}, {"hidden", 1536}, {"heads", 16}, {"seq_len", 1024}, {"vocab", 51200}};
  q["parallelism"] = {{"global_batch", 16}, {"tp", 1}, {"pp", 1}, {"dp", 1}};
  q["hardware"] = {{"gpu", "A100-SXM4-40GB"}, {"gpus_per_node", 8}, {"num_gpus", 1}, {"system", "DGX A100"}};
  q["metrics"] = {{"step_time_s", 1.0}};
  json::Json later = q, small = q, stated = q;
  later["id"] = "v1-2023";
  later["source"]["date"] = "2023-05";
  small["id"] = "v1-small-batch";
  small["parallelism"]["global_batch"] = 2;
  stated["id"] = "v1-stated";
  stated["parallelism"]["micro_batch"] = 1;
  doc["data_points"] = json::Json::array({q, later, small, stated});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  // 2020: the whole batch of 16 in one pass; without recomputation it needs more than the 40 GB,
  // and selective recomputation did not exist yet: full.
  const auto& v1 = point(r, "v1");
  REQUIRE(v1.mapped);
  CHECK(v1.setup.find(" mb 16 ") != std::string::npos);
  CHECK(v1.setup.find(" full ") != std::string::npos);
  CHECK(v1.fits_memory);
  CHECK(assumes(v1, "global batch / dp = 16"));
  CHECK(assumes(v1, "recomputation not stated: full, the least that fits (without it"));
  // 2023: micro-batches existed (1 assumed) and the plan fits without recomputation.
  const auto& v23 = point(r, "v1-2023");
  CHECK(v23.setup.find(" mb 1 ") != std::string::npos);
  CHECK(v23.setup.find(" none ") != std::string::npos);
  CHECK(assumes(v23, "micro-batch size not given: 1 assumed"));
  CHECK(assumes(v23, "recomputation not stated: none assumed (the plan fits without it)"));
  // 2020 with a batch that fits: no recomputation.
  CHECK(point(r, "v1-small-batch").setup.find(" mb 2 ") != std::string::npos);
  CHECK(point(r, "v1-small-batch").setup.find(" none ") != std::string::npos);
  // A stated micro-batch stays.
  CHECK(point(r, "v1-stated").setup.find(" mb 1 ") != std::string::npos);
}

TEST_CASE("validate: a malformed file is an error naming it", "[calibration]") {
  auto doc = json::parse_text(R"({"data_points": 3})", "bad.json");
  REQUIRE_ERROR_CONTAINS(calibration::validate_published_json(doc, "bad.json", hw::Catalog::builtin()), "bad.json: /data_points: must be an array");
}

TEST_CASE("validate: the analytical estimate comes through the caller's callback, and is absent without one", "[calibration]") {
  // A fake estimator in place of planner::estimate_step (wired by the CLI): 1 s per step for
  // every plan, and a refusal for context-parallel plans.
  const std::string file = testing::source_path("tests/calibration/data/published-mini.json");
  calibration::ValidationOptions o;
  o.threads = 2;
  std::atomic<int> calls{0};
  o.analytical_step_s = [&calls](const plan::Plan& p, const plan::PlanContext&) {
    ++calls;
    if (p.cp > 1) throw Error("fake estimator: no context parallelism");
    return 1.0;
  };
  const auto r = calibration::validate_published(file, hw::Catalog::builtin(), o);
  CHECK(r.analytical);
  CHECK(calls == 4);  // the four training points that map onto a plan
  const auto& n = point(r, "mini-narayanan-1.7B");
  const auto& m = point(r, "mini-mosaic-125m");
  REQUIRE(n.mapped);
  REQUIRE(m.mapped);
  CHECK(n.predicted_analytical == 1.0);
  CHECK(n.error_analytical == Approx(1.0 / n.measured - 1));
  const auto& c = point(r, "mini-cp");
  CHECK_FALSE(c.mapped);
  CHECK(c.reason.find("fake estimator: no context parallelism") != std::string::npos);
  const auto& d = point(r, "mini-dgx2");
  REQUIRE(d.mapped);
  CHECK(r.training.mape_analytical ==
        Approx((std::fabs(n.error_analytical) + std::fabs(m.error_analytical) + std::fabs(d.error_analytical)) / 3));
  const auto j = calibration::to_json(r);
  CHECK(j["training"].contains("mape_analytical"));
  bool seen = false;
  for (const auto& q : j["points"])
    if (q["id"] == "mini-narayanan-1.7B") {
      seen = true;
      CHECK(q["predicted_analytical"].get<double>() == 1.0);
    }
  CHECK(seen);

  calibration::ValidationOptions plain;
  plain.threads = 2;
  const auto without = calibration::validate_published(file, hw::Catalog::builtin(), plain);
  CHECK_FALSE(without.analytical);
  CHECK(point(without, "mini-cp").mapped);
  CHECK(point(without, "mini-narayanan-1.7B").predicted_analytical == 0);
  const auto jw = calibration::to_json(without);
  CHECK_FALSE(jw["training"].contains("mape_analytical"));
  for (const auto& q : jw["points"]) CHECK_FALSE(q.contains("predicted_analytical"));
}

TEST_CASE("validate: the year a point ran comes from its date or a YY.MM container release", "[calibration]") {
  auto year = [](const std::string& date, const std::string& title = "", const std::string& note = "") {
    json::Json p = {{"source", {{"date", date}, {"title", title}}}, {"notes", json::Json::array()}};
    if (!note.empty()) p["notes"].push_back(note);
    return calibration::published_year(p);
  };
  CHECK(year("2021-04") == 2021);
  CHECK(year("2023-2024") == 2023);
  CHECK(year("2024-12..2025-02 (recipes for NeMo 24.09/24.11)") == 2024);
  CHECK(year("25.11") == 2025);  // an NGC / NeMo container release, not the year 25
  CHECK(year("", "NeMo 24.09 recipe") == 2024);
  CHECK(year("", "", "container nvcr.io/nvidia/nemo:25.04") == 2025);
  CHECK(year("", "Megatron-LM benchmark table", "published 2020") == 2020);
  CHECK_FALSE(year("", "Megatron 1.7B"));       // no year, no release
  CHECK_FALSE(year("", "", "lr 3.14 x 12345"));  // not a release pattern
}

TEST_CASE("validate: training points carry predicted peak memory and are grouped by node count, GPU and framework", "[calibration]") {
  const auto r = calibration::validate_published(testing::source_path("tests/calibration/data/published-mini.json"), hw::Catalog::builtin());
  int mapped = 0;
  for (const auto& p : r.points) {
    if (!p.mapped || p.metric != "step_time_s") continue;
    ++mapped;
    CHECK(p.peak_memory_bytes > 0);
    CHECK(p.memory_capacity_bytes > 0);
    CHECK(p.fits_memory == (p.peak_memory_bytes <= p.memory_capacity_bytes));
    CHECK_FALSE(p.framework.empty());
  }
  REQUIRE(mapped == r.training.points);
  // Every mapped training point is in exactly one node-count group, one GPU group and one
  // framework group.
  int nodes = 0, gpus = 0, frameworks = 0;
  for (const auto& g : r.groups) {
    if (g.title == "single node" || g.title == "multi-node") nodes += g.points;
    if (g.title.rfind("GPU ", 0) == 0) gpus += g.points;
    if (g.title.rfind("framework ", 0) == 0) frameworks += g.points;
  }
  CHECK(nodes == mapped);
  CHECK(gpus == mapped);
  CHECK(frameworks == mapped);
  CHECK(point(r, "mini-cp").framework == "NeMo (Megatron-core)");
  CHECK(r.loso_available);
  const json::Json j = calibration::to_json(r);
  CHECK(j["training"]["loso_mape"].get<double>() == Approx(r.training.mape));
  CHECK(j["groups"].size() == r.groups.size());
}

TEST_CASE("validate: a FLOP-formula point without the formula's layers or hidden size is skipped, not read", "[calibration]") {
  auto doc = json::parse_file(testing::source_path("tests/calibration/data/published-mini.json"));
  json::Json kept = json::Json::array();
  for (const auto& p : doc["data_points"])
    if (p["id"] == "mini-narayanan-1.7B") kept.push_back(p);
  REQUIRE(kept.size() == 1);
  for (const char* field : {"layers", "hidden"}) {
    json::Json one = kept;
    one[0]["model"].erase(field);
    json::Json d = doc;
    d["data_points"] = one;
    const auto r = calibration::validate_published_json(d, "mini.json", hw::Catalog::builtin());
    REQUIRE(r.points.size() == 1);
    const auto& p = r.points[0];
    // Nothing converts 137 TFLOP/s back to a step time without l and h: no measured value.
    CHECK_FALSE(p.mapped);
    CHECK_FALSE(p.reason.empty());
  }
}

TEST_CASE("validate: a shape no catalog model has is built from the point, and part of a node is modelled", "[calibration]") {
  auto doc = json::parse_file(testing::source_path("tests/calibration/data/published-mini.json"));
  json::Json points = json::Json::array();
  for (const auto& p : doc["data_points"]) {
    if (p["id"] == "mini-narayanan-1.7B") {
      json::Json q = p;
      q["id"] = "shape-only";
      q["model"]["hidden"] = 2560;  // 24 layers, hidden 2560, 20 heads: no catalog model
      q["model"]["heads"] = 20;
      points.push_back(q);
    }
    if (p["id"] == "mini-nccl-1n") {
      json::Json q = p;
      q["id"] = "four-of-eight";
      q["hardware"]["num_gpus"] = 4;
      points.push_back(q);
    }
  }
  REQUIRE(points.size() == 2);
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& s = point(r, "shape-only");
  REQUIRE(s.mapped);
  CHECK(s.setup.find("gpt-shape-l24-h2560-a20") != std::string::npos);
  const auto built = std::find_if(s.assumptions.begin(), s.assumptions.end(),
                                  [](const std::string& a) { return a.find("GPT-style decoder") != std::string::npos; });
  CHECK(built != s.assumptions.end());
  CHECK(s.predicted > 0);
  // Same F = 96 B s l h^2 (...) conversion, with the new hidden size.
  const double B = 512, sq = 2048, l = 24, h = 2560, V = 51200;
  CHECK(s.measured == Approx(96 * B * sq * l * h * h * (1 + sq / (6 * h) + V / (16 * l * h)) / (137e12 * 32)));
  const auto& f = point(r, "four-of-eight");
  REQUIRE(f.mapped);
  CHECK(f.cluster == "1 x dgx-h100:4gpu");
  CHECK(f.num_gpus == 4);
  CHECK(f.predicted > 0);
}

TEST_CASE("validate: clusters from the point's GPU and interconnect fields, each assumption listed", "[calibration]") {
  // The context-parallel point (Llama 3 8B on 8 H100) under other hardware descriptions.
  auto doc = json::parse_file(testing::source_path("tests/calibration/data/published-mini.json"));
  json::Json base;
  for (const auto& p : doc["data_points"])
    if (p["id"] == "mini-cp") base = p;
  REQUIRE(base.is_object());
  struct Case {
    const char* id;
    const char* gpu;
    const char* inter;
    const char* system;
    int gpus;
    const char* cluster;
  };
  const Case cases[] = {
      {"ib-h100-16", "H100 80GB SXM", "InfiniBand 400 Gb/s per GPU", "", 16, "2 x dgx-h100"},
      {"hgx-h100", "H100", "", "HGX H100 8-GPU", 8, "1 x dgx-h100"},
      {"h200-one-node", "H200", "", "8x H200 server", 8, "1 x p5e.48xlarge"},
  };
  json::Json points = json::Json::array();
  for (const Case& c : cases) {
    json::Json q = base;
    q["id"] = c.id;
    q["hardware"] = {{"gpu", c.gpu}, {"inter_node", c.inter}, {"system", c.system}, {"num_gpus", c.gpus}};
    q["parallelism"]["dp"] = c.gpus / 2;
    q["parallelism"]["global_batch"] = 16 * c.gpus;
    points.push_back(q);
  }
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  for (const Case& c : cases) {
    INFO(c.id);
    const auto& p = point(r, c.id);
    REQUIRE(p.mapped);
    CHECK(p.cluster == c.cluster);
    CHECK(p.predicted > 0);
  }
  // Only the clusters inferred from loose descriptions carry an assumption saying so.
  CHECK(assumes(point(r, "ib-h100-16"), "modelled as"));
  CHECK(assumes(point(r, "hgx-h100"), "modelled as"));
  CHECK(assumes(point(r, "h200-one-node"), "modelled as"));
}

TEST_CASE("validate: a profile's calibration applies to the points on its GPU type only", "[calibration]") {
  // The callback the CLI wires to planner::with_calibration: here every compute efficiency of
  // one GPU type at 0.05 (far below any default), so its training points
  // slow down and the others keep their uncalibrated prediction exactly.
  const std::string file = testing::source_path("tests/calibration/data/published-mini.json");
  calibration::ValidationOptions plain;
  const auto base = calibration::validate_published(file, hw::Catalog::builtin(), plain);
  CHECK(base.loso_available);
  const auto& n0 = point(base, "mini-narayanan-1.7B");
  const auto& m0 = point(base, "mini-cp");  // an H100 point
  REQUIRE(n0.mapped);
  REQUIRE(m0.mapped);
  REQUIRE(n0.gpu != m0.gpu);
  auto slow = std::make_shared<sim::CalibrationTable>();
  sim::CalibrationEntry e;
  e.compute_efficiency = 0.05;
  slow->add(e);
  std::atomic<int> calibrated{0};
  calibration::ValidationOptions o;
  o.threads = 2;
  o.calibrate = [&](const hw::GpuSpec& gpu, sim::SimOptions& so) {
    if (gpu.name != n0.gpu) return false;
    so.calibration = slow;
    ++calibrated;
    return true;
  };
  const auto r = calibration::validate_published(file, hw::Catalog::builtin(), o);
  CHECK(calibrated >= 1);
  CHECK_FALSE(r.loso_available);  // a calibration's provenance is not known here
  CHECK(point(r, "mini-narayanan-1.7B").predicted > 1.5 * n0.predicted);
  CHECK(point(r, "mini-cp").predicted == m0.predicted);
  CHECK(point(r, "mini-nccl-1n").predicted == point(base, "mini-nccl-1n").predicted);
}

TEST_CASE("validate: flash attention before FlashAttention-2, or with ALiBi before flash-attn 2.4, is FlashAttention-1-class",
          "[calibration]") {
  json::Json doc = json::parse_file(testing::source_path("tests/calibration/data/published-mini.json"));
  json::Json pts = json::Json::array();
  for (const auto& p : doc["data_points"]) {
    if (p["id"] != "mini-mosaic-125m") continue;
    for (const auto& [id, notes, date] : {std::tuple{"fa-2023", "FlashAttention", "2023-2024"},
                                          std::tuple{"fa-alibi-2023", "MPT: ALiBi, FlashAttention", "2023-2024"},
                                          std::tuple{"fa-alibi-2024", "MPT: ALiBi, FlashAttention", "2024-05"},
                                          std::tuple{"fa-2022", "FlashAttention", "2022-11"}}) {
      json::Json q = p;
      q["id"] = id;
      q["model"]["arch_notes"] = notes;
      q["source"]["date"] = date;
      pts.push_back(q);
    }
  }
  doc["data_points"] = pts;
  const auto r = calibration::validate_published_json(doc, "mini", hw::Catalog::builtin());
  auto impl = [&](const std::string& id) {
    const auto& p = point(r, id);
    REQUIRE(p.mapped);
    return p.setup.substr(p.setup.rfind(' ') + 1);
  };
  CHECK(impl("fa-2023") == "flash");
  CHECK(impl("fa-alibi-2023") == "flash1");
  CHECK(impl("fa-alibi-2024") == "flash");
  CHECK(impl("fa-2022") == "flash1");
  const auto& a = point(r, "fa-alibi-2023").assumptions;
  CHECK(std::any_of(a.begin(), a.end(), [](const std::string& s) { return s.find("FlashAttention-1-class") != std::string::npos; }));
  // Same work, half the attention speed: the FA1-class prediction is the slower one.
  CHECK(point(r, "fa-alibi-2023").predicted > point(r, "fa-2023").predicted);
}

TEST_CASE("validate: a stated Composer FSDP mixed precision mode sets the gradient reduction's precision, else the stack's default",
          "[calibration]") {
  json::Json doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-mosaic-125m");
  json::Json pts = json::Json::array();
  for (const auto& [id, precision] : {std::pair{"unstated", "amp_bf16"}, std::pair{"default", "amp_bf16 (mixed-precision mode DEFAULT)"},
                                      std::pair{"pure", "amp_bf16 (mixed-precision mode PURE)"}}) {
    json::Json q = base;
    q["id"] = id;
    q["precision"] = precision;
    pts.push_back(q);
  }
  doc["data_points"] = pts;
  const auto r = calibration::validate_published_json(doc, "mini", hw::Catalog::builtin());
  for (const char* id : {"unstated", "default", "pure"}) REQUIRE(point(r, id).mapped);
  CHECK(assumes(point(r, "unstated"), "gradients reduced in fp32, 4 bytes each (pytorch-fsdp's default under bf16 training)"));
  CHECK(assumes(point(r, "default"), "gradients reduced in fp32 (the stated Composer FSDP mixed precision mode"));
  CHECK_FALSE(assumes(point(r, "pure"), "gradients reduced in"));
  // The same run; fp32 reduce-scatters move twice the bytes of PURE's bf16 ones.
  CHECK(point(r, "unstated").predicted == Approx(point(r, "default").predicted));
  CHECK(point(r, "pure").predicted <= point(r, "default").predicted);
}

TEST_CASE("validate: SMDDP-vs-DDP speedups and Horovod scaling efficiencies are ratios of two simulations", "[calibration]") {
  const json::Json doc = json::parse_text(R"json({"data_points": [
    {"id": "smddp-2", "kind": "relative_speedup", "source": {"title": "SageMaker guide"},
     "hardware": {"gpu": "V100-SXM2-32GB", "gpus_per_node": 8, "inter_node": "100 Gbps EFA", "num_gpus": 16, "system": "2x ml.p3dn.24xlarge"},
     "metrics": {"other": {"smddp_speedup_vs_pytorch_ddp_bert": 0.41, "smddp_speedup_vs_pytorch_ddp_maskrcnn": 0.04}}},
    {"id": "smddp-4", "kind": "relative_speedup", "source": {"title": "SageMaker guide"},
     "hardware": {"gpu": "V100-SXM2-32GB", "gpus_per_node": 8, "inter_node": "100 Gbps EFA", "num_gpus": 32, "system": "4x ml.p3dn.24xlarge"},
     "metrics": {"other": {"smddp_speedup_vs_pytorch_ddp_bert": 0.52}}},
    {"id": "smddp-8", "kind": "relative_speedup", "source": {"title": "SageMaker guide"},
     "hardware": {"gpu": "V100-SXM2-32GB", "gpus_per_node": 8, "inter_node": "100 Gbps EFA", "num_gpus": 64, "system": "8x ml.p3dn.24xlarge"},
     "metrics": {"other": {"smddp_speedup_vs_pytorch_ddp_bert": 0.13}}},
    {"id": "smddp-maskrcnn-only", "kind": "relative_speedup", "source": {"title": "SageMaker guide"},
     "hardware": {"gpu": "V100-SXM2-32GB", "num_gpus": 16, "system": "2x ml.p3dn.24xlarge"},
     "metrics": {"other": {"smddp_speedup_vs_pytorch_ddp_maskrcnn": 0.04}}},
    {"id": "hvd-v100", "kind": "scaling_efficiency", "source": {"title": "Horovod"}, "parallelism": {"micro_batch": 64},
     "hardware": {"gpu": "V100-SXM2-16GB", "num_gpus": 16, "system": "2x p3.16xlarge"},
     "metrics": {"other": {"scaling_efficiency": {"inception_v3": 0.9, "resnet101": 0.9}}}},
    {"id": "hvd-p100", "kind": "scaling_efficiency", "source": {"title": "Horovod"}, "parallelism": {"micro_batch": 64},
     "hardware": {"gpu": "P100 (Pascal)", "num_gpus": 128, "inter_node": "25 Gbit/s RoCE"},
     "metrics": {"other": {"scaling_efficiency": {"resnet101": 0.9}}}}]})json",
                                          "libs.json");
  calibration::ValidationOptions o;
  o.analytical_step_s = [](const plan::Plan& p, const plan::PlanContext&) { return p.dp_algorithm == plan::DpAlgorithm::smddp ? 1.0 : 1.2; };
  const auto r = calibration::validate_published_json(doc, "libs.json", hw::Catalog::builtin(), o);
  // The throughput ratio SMDDP / DDP of BERT-large on 2 x p3dn, from the two simulations.
  const auto& s = point(r, "smddp-2");
  REQUIRE(s.mapped);
  CHECK(s.metric == "throughput_ratio");
  CHECK(s.measured == Approx(1.41));
  CHECK(s.cluster == "2 x p3dn.24xlarge");
  // One simulated step; `nccl_fraction` < 1 derates the cluster's network as validate does for
  // DDP's NCCL on p3dn.
  auto step = [](plan::DpAlgorithm a, const std::string& cluster, int gpus, const std::string& model, int64_t seq, int64_t mb,
                 double bucket, std::optional<Precision> precision = std::nullopt, double nccl_fraction = 1.0) {
    hw::Catalog cat = hw::Catalog::builtin();
    if (nccl_fraction < 1.0) cat.derate_network(cluster, nccl_fraction, "test");
    const int per_node = cat.instance(cluster).gpu_count;
    plan::Plan p;
    p.model = model;
    p.instance_type = cluster;
    p.instance_count = std::max(1, gpus / per_node);
    p.dp = gpus;
    p.micro_batch = mb;
    p.global_batch = mb * gpus;
    p.seq_len = seq;
    p.dp_algorithm = a;
    p.bucket_size_bytes = bucket;
    p.precision = precision;
    p.software = "pytorch-eager";  // validate runs the data-parallel libraries' points on eager PyTorch
    if (gpus < per_node) p.instance_type = cat.add_partial_instance(cluster, gpus);
    const auto ctx = plan::resolve(p, cat, "t");
    sim::PlanSimOptions so;
    so.sim = sim::options_for(p);
    so.sim.record_timeline = false;
    so.memory_events = false;
    so.granularity = plan::Granularity::layer;
    so.fidelity = sim::Fidelity::symmetric;
    return sim::simulate_plan(p, ctx, so).step.step_time_s;
  };
  // DDP's NCCL at 80% of p3dn's EFA line rate on 2 nodes (nccl-tests with aws-ofi-nccl, 2019).
  const double ddp = step(plan::DpAlgorithm::ring, "p3dn.24xlarge", 16, "bert-large", 128, 64, 25e6, std::nullopt, 0.80);
  const double ratio = ddp / step(plan::DpAlgorithm::smddp, "p3dn.24xlarge", 16, "bert-large", 128, 64, 25e6);
  CHECK(s.predicted == Approx(ratio).epsilon(1e-12));
  CHECK(s.predicted > 1);  // SMDDP moves 1/1.875 of the ring's bytes through each NIC
  CHECK(ddp > step(plan::DpAlgorithm::ring, "p3dn.24xlarge", 16, "bert-large", 128, 64, 25e6));  // the derated network costs time
  CHECK(s.error == Approx(s.predicted / 1.41 - 1));
  CHECK(s.predicted_analytical == Approx(1.2));
  CHECK(std::any_of(s.assumptions.begin(), s.assumptions.end(), [](const std::string& a) { return a.find("maskrcnn") != std::string::npos; }));
  CHECK(std::any_of(s.assumptions.begin(), s.assumptions.end(), [](const std::string& a) { return a.find("80 Gb/s") != std::string::npos; }));
  CHECK(point(r, "smddp-maskrcnn-only").reason.find("no catalog model for maskrcnn") != std::string::npos);
  // 50-60 Gb/s from 8 nodes (55), log-linear between 2 and 8: 67.5 Gb/s on 4.
  auto says = [](const calibration::ValidationPoint& v, const std::string& text) {
    return std::any_of(v.assumptions.begin(), v.assumptions.end(), [&](const std::string& a) { return a.find(text) != std::string::npos; });
  };
  CHECK(says(point(r, "smddp-4"), "reaches 68 Gb/s"));
  CHECK(says(point(r, "smddp-8"), "reaches 55 Gb/s"));
  // A slower network only makes DDP slower: the speedup grows from 2 to 8 nodes.
  CHECK(point(r, "smddp-8").predicted > point(r, "smddp-2").predicted);
  // Horovod's efficiency: one GPU's step over sixteen's, ResNet-101 at 64 per GPU in fp32
  // (tf_cnn_benchmarks without --use_fp16).
  const auto& h = point(r, "hvd-v100");
  REQUIRE(h.mapped);
  CHECK(h.metric == "scaling_efficiency");
  const double fusion = 64.0 * 1024 * 1024;
  const double eff = step(plan::DpAlgorithm::horovod, "p3.16xlarge", 1, "resnet-101", 0, 64, fusion, Precision::fp32) /
                     step(plan::DpAlgorithm::horovod, "p3.16xlarge", 16, "resnet-101", 0, 64, fusion, Precision::fp32);
  CHECK(h.predicted == Approx(eff).epsilon(1e-12));
  CHECK(h.predicted < 1);
  CHECK(h.measured == Approx(0.9));
  CHECK(std::any_of(h.assumptions.begin(), h.assumptions.end(),
                    [](const std::string& a) { return a.find("inception_v3: no catalog model") != std::string::npos; }));
  // The P100 point runs on 32 servers of 4 P100 PCIe joined by 25 Gbit/s RoCE.
  const auto& p100 = point(r, "hvd-p100");
  REQUIRE(p100.mapped);
  CHECK(p100.cluster == "32 x p100-pcie-4gpu-roce25");
  CHECK(p100.gpu == "P100-PCIE-16GB");
  const double eff128 = step(plan::DpAlgorithm::horovod, "p100-pcie-4gpu-roce25", 1, "resnet-101", 0, 64, fusion, Precision::fp32) /
                        step(plan::DpAlgorithm::horovod, "p100-pcie-4gpu-roce25", 128, "resnet-101", 0, 64, fusion, Precision::fp32);
  CHECK(p100.predicted == Approx(eff128).epsilon(1e-12));
  CHECK(p100.predicted > 0);
  CHECK(p100.predicted < 1);
  CHECK(r.libraries.points == 5);
  CHECK(r.libraries.unmapped == 1);
  CHECK(calibration::to_json(r)["libraries"]["points"] == 5);
}

TEST_CASE("validate: MoE points map onto their catalog models with ep (Qwen3-30B-A3B, DeepSeek-V3 with MLA)", "[calibration][moe]") {
  const auto r = calibration::validate_published(testing::source_path("calibration/data/published-moe.json"), hw::Catalog::builtin());
  const auto& qwen = point(r, "nemo-automodel-h100-qwen3-30b-a3b-8gpu");
  REQUIRE(qwen.mapped);
  CHECK(qwen.setup.find("qwen3-30b-a3b") == 0);
  CHECK(qwen.setup.find(" ep8 ") != std::string::npos);
  CHECK(std::any_of(qwen.assumptions.begin(), qwen.assumptions.end(),
                    [](const std::string& a) { return a.find("modelled as ZeRO-1") != std::string::npos; }));
  const auto& dsv3 = point(r, "nemo-automodel-h100-deepseek-v3-256gpu");
  REQUIRE(dsv3.mapped);
  CHECK(dsv3.setup.find("deepseek-v3") == 0);
  CHECK(dsv3.setup.find(" ep") != std::string::npos);
}

TEST_CASE("validate: a DGX-2 point maps onto 16 V100 SXM3 on NVSwitch with 8 x 100 Gb/s EDR InfiniBand", "[calibration]") {
  // Megatron-LM v1's 1B model on one GPU of a DGX-2 (images/tables.tex: 1.121 s per step; the
  // mini file rounds it to 1.1), and the same point on two whole DGX-2 nodes.
  auto doc = mini_doc();
  json::Json q = mini_point(doc, "mini-dgx2");
  q["id"] = "dgx2-32";
  q["hardware"]["num_gpus"] = 32;
  q["hardware"]["inter_node"] = "800 Gbps per node (InfiniBand EDR, 12.5 GB/s per link)";
  q["parallelism"]["dp"] = 32;
  q["parallelism"]["global_batch"] = 256;
  doc["data_points"] = json::Json::array({mini_point(doc, "mini-dgx2"), q});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& one = point(r, "mini-dgx2");
  REQUIRE(one.mapped);
  CHECK(one.cluster == "1 x dgx-2:1gpu");
  CHECK(one.gpu == "V100-SXM3-32GB");
  CHECK(one.measured == Approx(1.1));
  CHECK(one.fits_memory);
  const auto& two = point(r, "dgx2-32");
  REQUIRE(two.mapped);
  CHECK(two.cluster == "2 x dgx-2");
  CHECK(two.gpus_per_node == 16);
  // The stated "800 Gbps per node ... EDR" is the catalog node's own network: no variant, no assumption.
  CHECK(std::none_of(two.assumptions.begin(), two.assumptions.end(),
                     [](const std::string& a) { return a.find("network as stated") != std::string::npos; }));
  // The catalog node (DGX-2 announcement, GTC 2018): 16 GPUs, 150 GB/s NVSwitch per direction,
  // 8 EDR NICs = 800 Gb/s = 100 GB/s per direction, 125 TFLOP/s fp16 per GPU (2 PFLOPS / 16).
  const auto& dgx2 = hw::Catalog::builtin().instance("dgx-2");
  CHECK(dgx2.gpu_count == 16);
  CHECK(dgx2.network.nics == 8);
  CHECK(dgx2.network.bandwidth_bytes_per_s == Approx(100e9));
  CHECK(dgx2.network.fabric == "InfiniBand EDR");
  CHECK(hw::Catalog::builtin().gpu("V100-SXM3-32GB").peak_flops_per_s(Precision::fp16) == Approx(125e12));
}

TEST_CASE("validate: a stated fabric no catalog node has builds the node with that network, the assumption listed", "[calibration]") {
  // nccl-tests issue #119's servers: 8 A100-SXM4-40GB with 4x 200G HDR InfiniBand (DGX A100 has 8).
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-cp");
  struct Case {
    const char* id;
    const char* inter;
    const char* cluster;
    bool variant;
  };
  const Case cases[] = {
      {"4xhdr", "4x 200G HDR IB", "2 x dgx-a100-40gb:4x200Gbps", true},
      {"4xhdr-word", "4x HDR InfiniBand", "2 x dgx-a100-40gb:4x200Gbps", true},
      {"per-node", "800 Gb/s per node (RoCE)", "2 x dgx-a100-40gb:8x100Gbps", true},
      {"same", "8x 200 Gb/s HDR InfiniBand per node (+2 storage HCAs)", "2 x dgx-a100-40gb", false},
      {"bytes-not-bits", "InfiniBand, 50 GB/s per node", "2 x dgx-a100-40gb", false},
  };
  json::Json points = json::Json::array();
  for (const Case& c : cases) {
    json::Json q = base;
    q["id"] = c.id;
    q["hardware"] = {{"gpu", "A100-SXM4-40GB"}, {"inter_node", c.inter}, {"num_gpus", 16}};
    q["model"] = {{"layers", 24}, {"hidden", 2048}, {"heads", 16}, {"seq_len", 2048}, {"vocab", 50368}};
    q["parallelism"] = {{"global_batch", 64}, {"micro_batch", 1}, {"tp", 1}, {"pp", 1}, {"dp", 16}};
    points.push_back(q);
  }
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  for (const Case& c : cases) {
    INFO(c.id);
    const auto& p = point(r, c.id);
    REQUIRE(p.mapped);
    CHECK(p.cluster == c.cluster);
    const bool listed = std::any_of(p.assumptions.begin(), p.assumptions.end(),
                                    [](const std::string& a) { return a.find("network as stated") != std::string::npos; });
    CHECK(listed == c.variant);
  }
  // Half the NICs at the same rate: the inter-node all-reduce of 16 GPUs is slower.
  CHECK(point(r, "4xhdr").predicted > point(r, "same").predicted);
  // The variant itself: 4 NICs of 200 Gb/s = 100 GB/s per direction for the node.
  hw::Catalog cat = hw::Catalog::builtin();
  const auto& v = cat.instance(cat.add_network_variant("dgx-a100-40gb", 4, 25e9, "test"));
  CHECK(v.network.nics == 4);
  CHECK(v.network.nic_bandwidth_bytes_per_s() == Approx(25e9));
  CHECK(v.gpu_count == 8);
  REQUIRE_ERROR_CONTAINS(cat.add_network_variant("dgx-a100-40gb", 3, 25e9, "test"), "3 NICs cannot be shared evenly by 8 GPUs");
}

TEST_CASE("validate: the 30-layer Llama 3.1 405B proxy on pp 4 x vp 8 runs Megatron-core's embedding/loss split", "[calibration]") {
  // NVIDIA dgxc-benchmarking llama3.1 (commit 85380ff): 64 H100, tp 8 pp 4 cp 2 vp 8, 30 of the
  // 126 layers; Megatron-core runs 32 chunks on 30 layers only with account_for_embedding /
  // account_for_loss_in_pipeline_split (30 + 2 = 32: one unit per chunk). 10.1 s per step.
  auto doc = mini_doc();
  json::Json q = mini_point(doc, "mini-cp");
  q["id"] = "405b-proxy";
  q["source"]["title"] = "NVIDIA DGX Cloud Benchmarking recipe (NeMo/Megatron) baseline table: Llama 3.1 405b BF16";
  q["model"] = {{"layers", 30}, {"hidden", 16384}, {"heads", 128}, {"kv_heads", 8}, {"ffn_hidden", 53248},
                {"seq_len", 8192}, {"vocab", 128256}};
  q["parallelism"] = {{"global_batch", 64}, {"micro_batch", 1}, {"tp", 8}, {"pp", 4}, {"cp", 2}, {"dp", 1}, {"vp_interleave", 8}};
  q["hardware"] = {{"gpu", "H100-SXM5-80GB"}, {"inter_node", "8x 400 Gb/s NDR InfiniBand per node"}, {"num_gpus", 64}};
  q["metrics"] = {{"step_time_s", 10.1}};
  json::Json other = q;
  other["id"] = "even-126";  // the full model on pp 8 x vp 8: 128 units, 2 per chunk
  other["model"]["layers"] = 126;
  other["parallelism"]["pp"] = 8;
  other["parallelism"]["dp"] = 4;
  other["parallelism"]["global_batch"] = 256;
  other["hardware"]["num_gpus"] = 512;
  json::Json megatron_lm = q;  // the same numbers from a source that names no Megatron: no split assumed
  megatron_lm["id"] = "other-framework";
  megatron_lm["source"]["title"] = "some other trainer";
  doc["data_points"] = json::Json::array({q, other, megatron_lm});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin(), {.threads = 2});
  const auto& p = point(r, "405b-proxy");
  INFO(p.reason);
  REQUIRE(p.mapped);
  CHECK(p.cluster == "8 x dgx-h100");
  CHECK(p.setup.find("emb+loss-split") != std::string::npos);
  CHECK(p.measured == Approx(10.1));
  CHECK(p.predicted > 0);
  CHECK(std::any_of(p.assumptions.begin(), p.assumptions.end(), [](const std::string& a) {
    return a.find("1 units per chunk, the first chunk the embedding and 0 layer(s)") != std::string::npos;
  }));
  const auto& e = point(r, "even-126");
  REQUIRE(e.mapped);
  CHECK(e.setup.find("emb+loss-split") != std::string::npos);
  const auto& o = point(r, "other-framework");
  CHECK_FALSE(o.mapped);
  CHECK(o.reason.find("pp*vp = 32 model chunks but only 30 layers") != std::string::npos);
}

TEST_CASE("validate: TFLOP/s \"as Table 1\" use the formula the same source states on its Table 1 points", "[calibration]") {
  auto doc = mini_doc();
  const json::Json p = mini_point(doc, "mini-narayanan-1.7B");
  json::Json q = p;
  q["id"] = "table-2";
  q["metrics"]["tflops_kind"] = "as Table 1";
  q["source"]["ref"] = "Megatron-LM";
  q["source"]["locator"] = "Table 2 (PTD-P vs ZeRO-3 without model parallelism)";
  json::Json z = q;  // the ZeRO-3 row of the same table says what it ran in its notes
  z["id"] = "table-2-zero3";
  z["notes"] = json::Json::array({"ZeRO-3 via DeepSpeed integrated in Megatron codebase"});
  json::Json o = q;  // another source whose points never state the formula
  o["id"] = "other-source";
  o["source"]["title"] = "some other paper";
  const json::Json points = json::Json::array({p, q, z, o});
  REQUIRE(points.size() == 4);
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& t = point(r, "table-2");
  // The framework comes from the row's notes and the source, not from what the table compares.
  CHECK(t.framework == "Megatron-LM");
  CHECK(point(r, "table-2-zero3").framework == "DeepSpeed");
  REQUIRE(t.mapped);
  const double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
  CHECK(t.measured == Approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / (137e12 * 32)));
  CHECK(t.measured == Approx(point(r, "mini-narayanan-1.7B").measured));
  CHECK(t.measured_from.find("as Table 1") != std::string::npos);
  const auto& unconverted = point(r, "other-source");
  CHECK_FALSE(unconverted.mapped);
  CHECK(unconverted.reason.find("TFLOP/s with its FLOP convention") != std::string::npos);
}

TEST_CASE("validate: a collective point's stated NICs replace the catalog node's (4 x 200G HDR on DGX A100-class nodes)", "[calibration]") {
  // nccl-tests#119: 3 servers of 8 A100-SXM4-40GB with 4 x 200 Gb/s HDR each. Any all-reduce
  // across N nodes sends at least 2(N-1)/N x S out of every node, so over a node's NICs (4 x 25
  // GB/s = 100 GB/s) busbw (nccl-tests' factor 2(n-1)/n for n ranks) is at most
  // 100 x (23/24) / (2/3) = 143.75 GB/s; a ring reaches 100 of it, the node-aware tree over 3
  // nodes (a chain, every node an end in one tree) more. The DGX A100's 8 NICs would allow twice.
  auto doc = json::parse_file(testing::source_path("tests/calibration/data/published-mini.json"));
  json::Json q;
  for (const auto& p : doc["data_points"])
    if (p["id"] == "mini-nccl-1n") q = p;
  REQUIRE(q.is_object());
  q["id"] = "hdr4";
  q["hardware"] = {{"gpu", "A100-SXM4-40GB"}, {"gpus_per_node", 8}, {"inter_node", "4x 200G HDR IB"}, {"num_gpus", 24},
                   {"system", "3 servers x 8 A100-SXM4-40GB, 4x HDR IB per server"}};
  q["metrics"]["other"]["message_bytes"] = 134217728;
  q["metrics"]["other"]["busbw_GBps"] = 96.0;
  doc["data_points"] = json::Json::array({q});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& p = point(r, "hdr4");
  REQUIRE(p.mapped);
  CHECK(p.cluster == "3 x dgx-a100-40gb:4x200Gbps");
  CHECK(p.predicted <= 100.0 * (23.0 / 24.0) / (2.0 / 3.0));
  CHECK(p.predicted > 50.0);
  CHECK(std::any_of(p.assumptions.begin(), p.assumptions.end(),
                    [](const std::string& a) { return a.find("with 4 x 200 Gb/s instead of its 8 x 200 Gb/s") != std::string::npos; }));
}

TEST_CASE("validate: any catalog GPU a point names maps onto a node with it, a PCIe or other-memory variant does not", "[calibration]") {
  // Llama 3 8B (the mini cp point, without cp) under hardware descriptions the known systems do
  // not cover: the catalog itself says which nodes hold the named GPU.
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-cp");
  struct Case {
    const char* id;
    json::Json hardware;
    const char* cluster;  // "" = not mapped
  };
  const Case cases[] = {
      {"g6e-named", {{"gpu", "NVIDIA L40S"}, {"system", "ml.g6e.48xlarge"}, {"num_gpus", 8}}, "1 x g6e.48xlarge"},
      {"l40s-4", {{"gpu", "L40S 48GB"}, {"num_gpus", 4}}, "1 x g6e.12xlarge"},
      {"l4-two-nodes", {{"gpu", "NVIDIA L4"}, {"gpus_per_node", 8}, {"num_gpus", 16}, {"inter_node", "100 Gbps EFA"}}, "2 x g6.48xlarge"},
      {"a10g-2", {{"gpu", "A10G"}, {"num_gpus", 2}}, "1 x g5.12xlarge:2gpu"},
      {"h100-roce", {{"gpu", "H100 80GB HBM3"}, {"num_gpus", 16}, {"inter_node", "RoCE"}}, "2 x dgx-h100"},
      {"b200", {{"gpu", "B200"}, {"num_gpus", 8}}, "1 x p6-b200.48xlarge"},
      {"a100-4-per-node",
       {{"gpu", "A100-SXM4-40GB"}, {"gpus_per_node", 4}, {"num_gpus", 16}, {"inter_node", "4x 200 Gb/s Slingshot-11"}},
       "4 x dgx-a100-40gb:4gpu"},
      {"a100-pcie", {{"gpu", "A100 80GB PCIe"}, {"num_gpus", 8}, {"inter_node", "RoCE"}}, ""},
      {"h100-nvl", {{"gpu", "H100 NVL"}, {"num_gpus", 4}}, ""},
      {"l4-as-l40s-memory", {{"gpu", "L4"}, {"gpu_mem_gb", 48}, {"num_gpus", 1}}, ""},
      {"a10-is-not-a10g", {{"gpu", "A10"}, {"num_gpus", 1}}, ""},
  };
  json::Json points = json::Json::array();
  for (const Case& c : cases) {
    json::Json q = base;
    q["id"] = c.id;
    q["hardware"] = c.hardware;
    q["model"]["seq_len"] = 2048;
    q["parallelism"] = {{"global_batch", 64}, {"micro_batch", 1}, {"tp", 1}, {"pp", 1}, {"dp", c.hardware["num_gpus"]}};
    points.push_back(q);
  }
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  for (const Case& c : cases) {
    INFO(c.id);
    const auto& p = point(r, c.id);
    if (std::string(c.cluster).empty()) {
      CHECK_FALSE(p.mapped);
      CHECK(p.reason.find("no catalog cluster") != std::string::npos);
      continue;
    }
    REQUIRE(p.mapped);
    CHECK(p.cluster == c.cluster);
    CHECK(p.predicted > 0);
  }
  // A node chosen by its GPU alone says so; one the point names (ml.g6e.48xlarge) does not.
  CHECK(assumes(point(r, "l40s-4"), "modelled as the catalog's"));
  CHECK(assumes(point(r, "h100-roce"), "modelled as the catalog's"));
  CHECK_FALSE(assumes(point(r, "g6e-named"), "modelled as the catalog's"));
  // 4 GPUs per node: half a DGX A100 each, its 4 of 8 HDR NICs = the stated 4 x 200 Gb/s.
  CHECK(assumes(point(r, "a100-4-per-node"), "nodes of 4 GPUs: 4 of the 8 GPUs of a dgx-a100-40gb node"));
  CHECK_FALSE(assumes(point(r, "a100-4-per-node"), "network as stated"));
}

TEST_CASE("validate: a point that names a catalog model without its shape is that model when a stated parameter count agrees", "[calibration]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-cp");
  struct Case {
    const char* id;
    json::Json model;
    const char* setup;  // "" = not mapped
  };
  const Case cases[] = {
      {"llama2-70b-hf", {{"name", "meta-llama/Llama-2-70b-hf"}}, "llama2-70b"},
      {"llama-3.1-8b", {{"name", "Llama 3.1 8B"}, {"params_b", 8.0}}, "llama3-8b"},
      {"llama-3.1-405b", {{"name", "Llama 3.1 405B"}}, "llama3-405b "},
      {"gpt3-175b", {{"name", "GPT-3 175B"}, {"params_b", 175}}, "gpt3-175b"},
      {"mixtral", {{"name", "Mixtral-8x7B-v0.1"}}, "mixtral-8x7b"},
      {"wrong-size", {{"name", "Llama 2 7B"}, {"params_b", 13}}, ""},
      {"no-size", {{"name", "GPT-2-like model"}}, ""},
  };
  json::Json points = json::Json::array();
  for (const Case& c : cases) {
    json::Json q = h100_run(base, c.id, c.model, 8, 8, 1);
    q["model"]["seq_len"] = 4096;
    points.push_back(q);
  }
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  for (const Case& c : cases) {
    INFO(c.id);
    const auto& p = point(r, c.id);
    if (std::string(c.setup).empty()) {
      CHECK_FALSE(p.mapped);
      CHECK(p.reason.find("layers / hidden / heads are not given") != std::string::npos);
      continue;
    }
    REQUIRE(p.mapped);
    CHECK(p.setup.rfind(c.setup, 0) == 0);
    CHECK(assumes(p, "shape not stated"));
  }
}

TEST_CASE("validate: the batch from tokens per step or micro-batch x dp x accumulation, a dp that counts cp, GPUs from the layout, AMP and fp32",
          "[calibration]") {
  // The mini cp point (Llama 3 8B, seq 8192, gb 128, mb 1, tp 1 pp 1 dp 4 cp 2 on 8 H100) with
  // its batch or layout written other ways; each reads back the same plan.
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-cp");
  auto variant = [&](const char* id, auto&& edit) {
    json::Json q = base;
    q["id"] = id;
    edit(q);
    return q;
  };
  doc["data_points"] = json::Json::array({
      base,
      variant("tokens", [](json::Json& q) { q["parallelism"].erase("global_batch"), q["parallelism"]["global_batch_tokens"] = 128 * 8192; }),
      variant("accum", [](json::Json& q) { q["parallelism"].erase("global_batch"), q["parallelism"]["other_grad_accum"] = 32; }),
      variant("dp-with-cp", [](json::Json& q) { q["parallelism"]["dp"] = 8; }),
      variant("no-batch", [](json::Json& q) { q["parallelism"].erase("global_batch"); }),
      variant("gpus-from-layout", [](json::Json& q) { q["hardware"].erase("num_gpus"); }),
      variant("amp", [](json::Json& q) { q["precision"] = "AMP"; }),
      variant("fp32", [](json::Json& q) { q["precision"] = "FP32"; }),
  });
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& ref = point(r, "mini-cp");
  REQUIRE(ref.mapped);
  for (const char* id : {"tokens", "accum", "dp-with-cp", "gpus-from-layout"}) {
    INFO(id);
    const auto& p = point(r, id);
    REQUIRE(p.mapped);
    CHECK(p.setup == ref.setup);
    CHECK(p.predicted == Approx(ref.predicted).epsilon(1e-12));
  }
  CHECK(assumes(point(r, "tokens"), "global batch from the stated 1048576 tokens"));
  CHECK(assumes(point(r, "accum"), "gradient accumulation 32: 128"));
  CHECK(assumes(point(r, "dp-with-cp"), "counts the cp ranks"));
  CHECK(assumes(point(r, "gpus-from-layout"), "tp·pp·cp·dp = 8"));
  CHECK_FALSE(point(r, "no-batch").mapped);
  CHECK(point(r, "no-batch").reason == "the global batch is not given");
  CHECK(point(r, "amp").setup.find(" fp16 ") != std::string::npos);
  CHECK(assumes(point(r, "amp"), "AMP's default"));
  CHECK(point(r, "fp32").setup.find(" fp32 ") != std::string::npos);
  CHECK(point(r, "fp32").predicted > 2 * ref.predicted);  // no tensor cores at fp32
}

TEST_CASE("validate: tokens/s per GPU, model TFLOP/s and MFU alone convert to the step time that tokens/s gives", "[calibration]") {
  // llm-foundry's MPT-30B row (seq 4096, 8 x A100 80GB, global batch 168): 6513 tokens/s, 814
  // per GPU, 160 model TFLOP/s per GPU, MFU 0.5137 of 312 TFLOP/s (scripts/train/benchmarking/
  // README.md). Its own FLOP count (6N + attention) makes the four agree; ours must too.
  auto doc = mini_doc();
  json::Json base = mini_point(doc, "mini-mosaic-125m");
  base["model"] = {{"name", "MPT-30b"}, {"layers", 48}, {"hidden", 7168}, {"heads", 56}, {"seq_len", 4096}, {"vocab", 50368},
                   {"arch_notes", "MPT: ALiBi, FlashAttention, no biases, expansion 4"}};
  base["parallelism"] = {{"global_batch", 168}, {"micro_batch", 1}, {"tp", 1}, {"pp", 1}, {"dp", 8}, {"fsdp", "FULL_SHARD"},
                         {"activation_recompute", "full"}};
  base["hardware"]["peak_tflops_used_for_mfu"] = 312;
  auto variant = [&](const char* id, json::Json metrics) {
    json::Json q = base;
    q["id"] = id;
    q["metrics"] = metrics;
    return q;
  };
  doc["data_points"] = json::Json::array({
      variant("tokens", {{"tokens_per_s", 6513}}),
      variant("per-gpu", {{"tokens_per_s_per_gpu", 814.125}}),
      variant("model-tflops", {{"tflops_per_gpu", 160.0}, {"tflops_kind", "model TFLOP/s (column 'Model TFLOP')"}}),
      variant("mfu", {{"mfu", 0.5137}}),
      variant("hardware-tflops", {{"tflops_per_gpu", 213.7}, {"tflops_kind", "hardware TFLOP/s (HFU)"}}),
      variant("hfu", {{"hfu", 213.7 / 312}}),
      variant("unstated-convention", {{"tflops_per_gpu", 160.0}}),
  });
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const double step = 168.0 * 4096 / 6513;
  REQUIRE(point(r, "tokens").mapped);
  CHECK(point(r, "tokens").measured == Approx(step));
  CHECK(point(r, "per-gpu").measured == Approx(step).epsilon(1e-9));
  for (const char* id : {"model-tflops", "mfu"}) {
    INFO(id);
    REQUIRE(point(r, id).mapped);
    CHECK(point(r, id).measured == Approx(step).epsilon(0.005));
  }
  // Hardware FLOPs (HFU) count the recomputed forward too: llm-foundry's 4/3 x model FLOPs,
  // ours the forward of the 48 blocks (the LM head keeps its activations), within 1 %.
  for (const char* id : {"hardware-tflops", "hfu"}) {
    INFO(id);
    REQUIRE(point(r, id).mapped);
    CHECK(point(r, id).measured == Approx(step).epsilon(0.01));
    CHECK(point(r, id).measured_from.find("full recomputation's forward FLOPs") != std::string::npos);
  }
  // TFLOP/s without a convention: model or hardware FLOPs differ by a third, so not read.
  CHECK_FALSE(point(r, "unstated-convention").mapped);
  CHECK(point(r, "unstated-convention").reason.find("tflops_kind") != std::string::npos);
}

TEST_CASE("validate: fine-tuning, whole-run and MLPerf points with a per-step throughput are scored as training steps", "[calibration]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-mosaic-125m");
  auto variant = [&](const char* id, const char* kind) {
    json::Json q = base;
    q["id"] = id;
    q["kind"] = kind;
    return q;
  };
  json::Json lora = variant("lora", "finetuning_throughput");
  lora["notes"] = json::Json::array({"LoRA rank 16 on the attention projections"});
  json::Json time_only = variant("time-only", "full_training_run");
  time_only["metrics"] = {{"time_to_train", "3 days"}};
  doc["data_points"] = json::Json::array({variant("step", "training_throughput"), variant("finetune", "finetuning_throughput"),
                                          variant("run", "full_training_run"), variant("mlperf", "mlperf"), lora, time_only,
                                          variant("layer", "per_layer_timing")});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& step = point(r, "step");
  REQUIRE(step.mapped);
  for (const char* id : {"finetune", "run", "mlperf"}) {
    INFO(id);
    const auto& p = point(r, id);
    REQUIRE(p.mapped);
    // The same step, measured and predicted alike; what the kind adds is listed.
    CHECK(p.measured == Approx(step.measured).epsilon(1e-12));
    CHECK(p.predicted == Approx(step.predicted).epsilon(1e-12));
    CHECK(p.setup == step.setup);
  }
  CHECK(assumes(point(r, "finetune"), "fine-tuning: a training step over every parameter"));
  CHECK(assumes(point(r, "run"), "a whole training run: the run's average throughput"));
  CHECK(assumes(point(r, "mlperf"), "an MLPerf result: the run's average throughput"));
  // Parameter-efficient fine-tuning trains a sliver of the weights: refused, with the reason.
  CHECK_FALSE(point(r, "lora").mapped);
  CHECK(point(r, "lora").reason.find("parameter-efficient fine-tuning (\"lora\")") != std::string::npos);
  CHECK_FALSE(point(r, "time-only").mapped);
  CHECK_FALSE(point(r, "layer").mapped);
  CHECK(point(r, "layer").reason.find("per_layer_timing") != std::string::npos);
  // All four count as training points, and each other kind gets its own group.
  CHECK(r.training.points == 4);
  const auto group = std::find_if(r.groups.begin(), r.groups.end(), [](const auto& g) { return g.title == "kind finetuning_throughput"; });
  REQUIRE(group != r.groups.end());
  CHECK(group->points == 1);
  CHECK(std::none_of(r.groups.begin(), r.groups.end(), [](const auto& g) { return g.title == "kind training_throughput"; }));
}

TEST_CASE("validate: recomputation stated as a kind, a yes or a no in any form", "[calibration]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-mosaic-125m");
  const std::vector<std::pair<json::Json, const char*>> cases = {
      {true, " full "},          {"enabled", " full "},         {"activation checkpointing", " full "},
      {"partitioned activation checkpointing (P_a)", " full "}, {"block", " full "},
      {false, " none "},         {"off", " none "},             {"no", " none "},
      {"selective (attention core)", " selective "},            {"full", " full "},
  };
  json::Json points = json::Json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    json::Json q = base;
    q["id"] = "rc" + std::to_string(i);
    q["parallelism"]["activation_recompute"] = cases[i].first;
    points.push_back(q);
  }
  json::Json odd = base;
  odd["id"] = "odd";
  odd["parallelism"]["activation_recompute"] = "sometimes";
  points.push_back(odd);
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& p = point(r, "rc" + std::to_string(i));
    INFO(cases[i].first.dump());
    REQUIRE(p.mapped);
    CHECK(p.setup.find(cases[i].second) != std::string::npos);
  }
  CHECK(assumes(point(r, "rc1"), "activation recomputation \"enabled\" names no kind: full"));
  // Text that names no kind, yes or no is treated as unstated: the least that fits, listed.
  CHECK(assumes(point(r, "odd"), "activation recomputation \"sometimes\" not understood"));
  CHECK(assumes(point(r, "odd"), "recomputation not stated"));
}

TEST_CASE("validate: what a point leaves out or writes as text is filled from what it states, each listed", "[calibration]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-mosaic-125m");
  auto variant = [&](const char* id) {
    json::Json q = base;
    q["id"] = id;
    return q;
  };
  // Numbers transcribed as text; text that is not one number stays unread.
  json::Json text = variant("text-numbers");
  text["parallelism"]["global_batch"] = "256";
  text["parallelism"]["micro_batch"] = " 16 ";
  text["hardware"]["num_gpus"] = "8";
  text["model"]["seq_len"] = "2048";
  json::Json not_number = variant("not-a-number");
  not_number["parallelism"]["global_batch"] = "0x100";
  // No sequence length: tokens per step / global batch.
  json::Json no_seq = variant("no-seq");
  no_seq["model"].erase("seq_len");
  no_seq["parallelism"]["global_batch_tokens"] = 256 * 2048;
  // No heads: the catalog model the name names, of the stated layers and hidden size.
  json::Json no_heads = variant("no-heads");
  no_heads["model"].erase("heads");
  // No heads on a shape no catalog model has: head dimension 128.
  json::Json built = variant("built-no-heads");
  built["model"] = {{"name", "in-house 1.6B"}, {"layers", 20}, {"hidden", 2560}, {"seq_len", 2048}, {"vocab", 50368}};
  // MFU without the peak it divides by: the GPU's dense peak in the run's precision.
  json::Json mfu = variant("mfu-no-peak");
  doc["data_points"] = json::Json::array({variant("base"), text, not_number, no_seq, no_heads, built});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& b = point(r, "base");
  REQUIRE(b.mapped);
  for (const char* id : {"text-numbers", "no-seq", "no-heads"}) {
    INFO(id);
    const auto& p = point(r, id);
    REQUIRE(p.mapped);
    CHECK(p.setup == b.setup);
    CHECK(p.measured == Approx(b.measured).epsilon(1e-12));
    CHECK(p.predicted == Approx(b.predicted).epsilon(1e-12));
  }
  CHECK_FALSE(point(r, "not-a-number").mapped);
  CHECK(point(r, "not-a-number").reason == "the global batch is not given");
  CHECK(assumes(point(r, "no-seq"), "sequence length not stated: 524288 tokens per step / global batch 256 = 2048"));
  CHECK(assumes(point(r, "no-heads"), "attention heads not stated: 12 (12 kv), as the catalog's mpt-125m"));
  const auto& bt = point(r, "built-no-heads");
  REQUIRE(bt.mapped);
  CHECK(assumes(bt, "attention heads not stated: 20 (head dimension 128)"));
  CHECK(bt.setup.rfind("gpt-shape-l20-h2560-a20 ", 0) == 0);
  // The base point's MFU against 312 TFLOP/s (A100 bf16), stated without the peak.
  const double base_step = b.measured;
  mfu["metrics"] = {{"mfu", b.model_tflops_measured / 312.0}};
  mfu["hardware"].erase("peak_tflops_used_for_mfu");
  doc["data_points"] = json::Json::array({mfu});
  const auto r2 = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& m = point(r2, "mfu-no-peak");
  REQUIRE(m.mapped);
  CHECK(m.measured == Approx(base_step).epsilon(1e-9));
  CHECK(m.measured_from.find("the GPU's dense bf16 peak 312 TFLOP/s (the source names none)") != std::string::npos);
}

TEST_CASE("validate: a GPU family is named as a word (GH200 is no H200, 8xH100 is H100), and FSDP hybrid sharding is ZeRO over all ranks",
          "[calibration]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-mosaic-125m");
  auto on_gpu = [&](const char* id, const char* gpu) {
    json::Json q = base;
    q["id"] = id;
    q["hardware"] = {{"gpu", gpu}, {"gpus_per_node", 8}, {"num_gpus", 8}};
    return q;
  };
  json::Json hybrid = on_gpu("hybrid", "H100-SXM5-80GB");
  hybrid["parallelism"]["fsdp"] = "HYBRID_SHARD";
  json::Json hybrid2 = on_gpu("hybrid-zero2", "H100-SXM5-80GB");
  hybrid2["parallelism"]["fsdp"] = "_HYBRID_SHARD_ZERO2";
  json::Json no_seq = on_gpu("catalog-seq", "H100-SXM5-80GB");
  no_seq["model"] = {{"name", "Llama 2 7B"}};
  doc["data_points"] = json::Json::array({on_gpu("gh200", "GH200 96GB"), on_gpu("counted", "8xH100 80GB"),
                                          on_gpu("h200", "NVIDIA H200 141GB"), hybrid, hybrid2, no_seq});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  CHECK_FALSE(point(r, "gh200").mapped);
  CHECK(point(r, "gh200").reason == "no catalog cluster has a GH200 96GB (the catalog's GPUs: trainplan catalog)");
  REQUIRE(point(r, "counted").mapped);
  CHECK(point(r, "counted").gpu == "H100-SXM5-80GB");
  REQUIRE(point(r, "h200").mapped);
  CHECK(point(r, "h200").gpu == "H200-SXM-141GB");
  const auto& h = point(r, "hybrid");
  REQUIRE(h.mapped);
  CHECK(h.setup.find(" zero3 ") != std::string::npos);
  CHECK(assumes(h, "FSDP HYBRID_SHARD (sharded within a node, replicated across): modelled as ZeRO-3 over all 8"));
  CHECK(point(r, "hybrid-zero2").setup.find(" zero2 ") != std::string::npos);
  // A catalog model without a stated sequence: its own, in the setup and the assumptions.
  const auto& c = point(r, "catalog-seq");
  REQUIRE(c.mapped);
  CHECK(c.setup.rfind("llama2-7b seq 4096 ", 0) == 0);
  CHECK(assumes(c, "sequence length not stated: 4096, the catalog model's"));
}

TEST_CASE("validate: DeepSpeed ZeRO-3 published in 2021 runs on deepspeed-2021 (a device sync before each tensor's gather)", "[calibration]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-mosaic-125m");
  auto deepspeed = [&](const char* id, const char* date) {
    json::Json q = base;
    q["id"] = id;
    q["source"] = {{"title", "DeepSpeed ZeRO-3 throughput"}, {"locator", "Table 1"}, {"ref", "example"}, {"date", date}};
    q["parallelism"]["fsdp"] = nullptr;
    q["parallelism"]["zero_stage"] = 3;
    q["hardware"] = {{"gpu", "A100-SXM4-40GB"}, {"gpus_per_node", 8}, {"num_gpus", 16}};
    q["parallelism"]["dp"] = 16;
    return q;
  };
  doc["data_points"] = json::Json::array({deepspeed("ds-2021", "2021-04"), deepspeed("ds-2023", "2023-05")});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  const auto& old = point(r, "ds-2021");
  const auto& now = point(r, "ds-2023");
  REQUIRE(old.mapped);
  REQUIRE(now.mapped);
  CHECK(old.framework == "DeepSpeed");
  CHECK(assumes(old, "software stack deepspeed-2021 (DeepSpeed published in 2021: ZeRO-3 gathers one tensor at a time after a device sync"));
  CHECK(assumes(now, "software stack deepspeed (DeepSpeed)"));
  CHECK_FALSE(assumes(now, "deepspeed-2021"));
}

TEST_CASE("validate: a node that states neither system nor interconnect says so in its assumption", "[calibration]") {
  json::Json doc = mini_doc();
  json::Json p = mini_point(doc, "mini-mosaic-125m");
  p["id"] = "h100-bare";
  p["hardware"]["gpu"] = "H100-SXM5-80GB";
  p["hardware"].erase("inter_node");
  doc["data_points"] = json::Json::array({p});
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin(), {.threads = 1});
  const auto& h = point(r, "h100-bare");
  REQUIRE(h.mapped);
  CHECK(h.cluster == "1 x dgx-h100");
  CHECK(assumes(h, "node (no system or interconnect stated) modelled as a DGX H100"));
  CHECK_FALSE(assumes(h, "()"));
}

TEST_CASE("validate: a mixture of experts stated by name or notes is scored as one, a shape that misses the stated parameters is not",
          "[calibration][moe]") {
  auto doc = mini_doc();
  const json::Json base = mini_point(doc, "mini-cp");
  const json::Json mixtral_shape = {{"layers", 32}, {"hidden", 4096}, {"heads", 32}, {"kv_heads", 8}, {"ffn_hidden", 14336},
                                    {"vocab", 32000}, {"seq_len", 4096}};
  struct Case {
    const char* id;
    json::Json model;
    const char* title;
    const char* setup;   // prefix; "" = not mapped
    const char* reason;  // when not mapped
  };
  json::Json named = mixtral_shape, notes = mixtral_shape, dense = mixtral_shape, built = mixtral_shape, llama = mixtral_shape;
  named["name"] = "Mixtral 8x7B";  // the dense attention shape, the experts only in the name
  notes["name"] = "an MoE model";
  notes["arch_notes"] = "MoE: 8 experts, top-2 routing";
  dense["name"] = "some model";
  dense["params_b"] = 46.7;        // 6x what the dense shape holds
  built["name"] = "MoE-64";
  built["arch_notes"] = "64 routed experts, top-6, one shared expert";
  built["ffn_hidden"] = 1408;
  const json::Json qwen = {{"name", "Qwen3-30B-A3B"}, {"layers", 48}, {"hidden", 2048}, {"heads", 32}, {"kv_heads", 4},
                           {"vocab", 151936}, {"seq_len", 4096}};
  llama["name"] = "Llama-like 7B";
  llama["ffn_hidden"] = 11008;
  llama["kv_heads"] = 32;
  const Case cases[] = {
      {"named", named, "synthetic", "mixtral-8x7b", ""},
      {"notes", notes, "synthetic", "mixtral-8x7b", ""},
      {"dense-mismatch", dense, "synthetic", "", "mixture of experts? state model.num_experts"},
      {"built-moe", built, "synthetic", "llama-shape-l32-h4096-a32-kv8-e64k6", ""},
      {"qwen", qwen, "synthetic", "qwen3-30b-a3b", ""},
      {"torchtitan", llama, "torchtitan benchmark", "llama2-7b", ""},
  };
  json::Json points = json::Json::array();
  for (const Case& c : cases) {
    json::Json q = h100_run(base, c.id, c.model, 4, 8, 2);
    q["source"]["title"] = c.title;
    points.push_back(q);
  }
  doc["data_points"] = points;
  const auto r = calibration::validate_published_json(doc, "mini.json", hw::Catalog::builtin());
  // Scored as the model each case names (its setup starts with it), or left out with the reason.
  for (const Case& c : cases) {
    INFO(c.id);
    const bool scored = *c.setup != '\0';
    CHECK(point(r, c.id).mapped == scored);
    if (scored) CHECK(point(r, c.id).setup.rfind(c.setup, 0) == 0);
    if (!scored) CHECK(point(r, c.id).reason.find(c.reason) != std::string::npos);
  }
  CHECK(point(r, "dense-mismatch").reason.find("46.7B") != std::string::npos);
  CHECK(assumes(point(r, "named"), "read from the name / notes: 8 routed experts"));
  CHECK(assumes(point(r, "qwen"), "experts not stated: 128 routed, top 8, as the catalog's Qwen3-30B-A3B"));
  CHECK(assumes(point(r, "notes"), "read from the name / notes: 8 routed experts, top 2"));
  const auto& moe = point(r, "built-moe");
  CHECK(assumes(moe, "64 experts top 6"));
  CHECK(assumes(moe, "shared expert: one"));
  const auto& tt = point(r, "torchtitan");
  CHECK(tt.framework == "PyTorch FSDP");
  CHECK(assumes(tt, "software stack pytorch-fsdp"));
}
