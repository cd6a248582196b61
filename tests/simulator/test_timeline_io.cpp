#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;
using trainplan::testing::build_hybrid;
using trainplan::testing::HybridSpec;
using trainplan::testing::test_gpu;

namespace {

plan::Timeline sample_timeline() {
  HybridSpec h;
  auto prog = build_hybrid(h);
  auto topo = sim::make_two_level_topology({h.dp * h.pp, h.tp, 3e11, 1e-6, 2.5e10, 5e-6});
  return sim::simulate_step(prog, topo, test_gpu(), {}).timeline;
}

}  // namespace

TEST_CASE("simulator: timelines round-trip through JSON files", "[simulator]") {
  plan::Timeline t = sample_timeline();
  REQUIRE(!t.events.empty());
  const auto path = std::filesystem::temp_directory_path() / "trainplan_sim_timeline_test.json";
  plan::write_timeline_file(path.string(), t);
  plan::Timeline back = plan::read_timeline_file(path.string());
  std::filesystem::remove(path);
  CHECK(json::dump(plan::to_json(back)) == json::dump(plan::to_json(t)));
  CHECK(back.events.size() == t.events.size());
  CHECK(back.step_time_s == t.step_time_s);
  CHECK(back.meta["simulator"]["fidelity"] == "full");
}

TEST_CASE("simulator: malformed timeline JSON names the field", "[simulator]") {
  json::Json doc = plan::to_json(sample_timeline());
  json::Json bad_kind = doc;
  bad_kind["events"][3]["kind"] = "compte";
  REQUIRE_ERROR_CONTAINS(plan::timeline_from_json(bad_kind, "t.json"), "/events/3/kind");
  json::Json reversed = doc;
  reversed["events"][0]["end_s"] = -1.0;
  REQUIRE_ERROR_CONTAINS(plan::timeline_from_json(reversed, "t.json"), "end_s is before start_s");
  json::Json extra = doc;
  extra["events"][0]["colour"] = "red";
  REQUIRE_ERROR_CONTAINS(plan::timeline_from_json(extra, "t.json"), "colour");
}

TEST_CASE("simulator: the Chrome trace has a process per rank and a thread per stream", "[simulator]") {
  plan::Timeline t = sample_timeline();
  json::Json trace = plan::chrome_trace(t);
  REQUIRE(trace.contains("traceEvents"));
  std::set<int> process_names, complete_pids;
  size_t complete = 0, counters = 0, expected_complete = 0;
  for (const auto& e : t.events)
    if (e.kind != plan::TaskKind::alloc && e.kind != plan::TaskKind::free) ++expected_complete;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names.insert(e["pid"].get<int>());
    if (ph == "X") {
      ++complete;
      complete_pids.insert(e["pid"].get<int>());
      CHECK(e["dur"].get<double>() >= 0);
      CHECK(e["ts"].get<double>() >= 0);
      CHECK(e["ts"].get<double>() + e["dur"].get<double>() <= t.step_time_s * 1e6 * (1 + 1e-12));
    }
    if (ph == "C") ++counters;
  }
  CHECK(complete == expected_complete);
  CHECK(counters == t.events.size() - expected_complete);
  CHECK(process_names == complete_pids);
  CHECK(process_names.size() == t.peak_memory_bytes.size());
}

TEST_CASE("simulator: streamed timeline and trace files are byte for byte the documents' dumps", "[simulator]") {
  // The writers emit one event at a time (never the whole JSON tree); the oracle is json::dump
  // of the in-memory documents, for a simulated step, an empty timeline and empty meta.
  plan::Timeline full = sample_timeline();
  plan::Timeline empty;
  empty.source = "predicted";
  for (const plan::Timeline* t : {&full, &empty}) {
    const auto dir = std::filesystem::temp_directory_path();
    const std::string tl = (dir / "trainplan_streamed.timeline.json").string();
    const std::string tr = (dir / "trainplan_streamed.trace.json").string();
    plan::write_timeline_file(tl, *t);
    plan::write_chrome_trace_file(tr, *t);
    CHECK(json::read_text_file(tl) == json::dump(plan::to_json(*t)));
    CHECK(json::read_text_file(tr) == json::dump(plan::chrome_trace(*t)));
    CHECK_FALSE(std::filesystem::exists(tl + ".tmp"));
    std::filesystem::remove(tl);
    std::filesystem::remove(tr);
  }
}
