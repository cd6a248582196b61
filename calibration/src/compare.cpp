#include "trainplan/calibration/compare.hpp"

#include <fmt/format.h>

#include <set>
#include <utility>

namespace trainplan::calibration {

json::Json comparison_trace(const plan::Timeline& predicted, const plan::Timeline& measured,
                            const std::string& predicted_label) {
  constexpr double kUs = 1e6;
  constexpr int kStreamsPerRank = 64;
  json::Json events = json::Json::array();
  auto add = [&](const plan::Timeline& t, int pid, const std::string& name) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", fmt::format("{}: step {:.6g} ms", name, t.step_time_s * 1e3)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    std::set<std::pair<int, int>> threads;
    for (const auto& e : t.events) {
      if (e.kind == plan::TaskKind::alloc || e.kind == plan::TaskKind::free) continue;
      const int tid = e.rank * kStreamsPerRank + e.stream;
      if (threads.insert({e.rank, e.stream}).second) {
        const std::string stream = e.stream < static_cast<int>(t.streams.size()) ? t.streams[static_cast<size_t>(e.stream)]
                                                                                  : fmt::format("stream {}", e.stream);
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                          {"args", {{"name", fmt::format("rank {} / {}", e.rank, stream)}}}});
        events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
      }
      std::string cat(plan::task_kind_name(e.kind));
      if (e.purpose != plan::CommPurpose::none) cat.append(",").append(plan::comm_purpose_name(e.purpose));
      json::Json args = {{"task", e.task}, {"phase", std::string(plan::phase_name(e.phase))}};
      if (e.bytes > 0) args["bytes"] = e.bytes;
      if (e.flops > 0) args["flops"] = e.flops;
      events.push_back({{"name", e.label.empty() ? std::string(plan::task_kind_name(e.kind)) : e.label},
                        {"cat", cat},
                        {"ph", "X"},
                        {"ts", e.start_s * kUs},
                        {"dur", (e.end_s - e.start_s) * kUs},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", args}});
    }
  };
  add(predicted, 1, "predicted (" + predicted_label + ")");
  add(measured, 2, "measured (" + measured.source + ")");
  json::Json doc;
  doc["traceEvents"] = events;
  doc["displayTimeUnit"] = "ms";
  return doc;
}

}  // namespace trainplan::calibration
