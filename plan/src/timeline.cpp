// Timeline JSON (read and write) and the Chrome trace event format writer.
#include "trainplan/plan/timeline.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json_stream.hpp"

namespace trainplan::plan {
namespace {

constexpr int kTimelineSchema = 1;

// Reverse lookup of a name table: values 0 .. last of the enum.
template <typename E>
E parse_enum(const json::Reader& r, E last, std::string_view (*name_of)(E)) {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(last); ++i) names.emplace_back(name_of(static_cast<E>(i)));
  const std::string s = r.as_choice(names);
  for (int i = 0; i <= static_cast<int>(last); ++i)
    if (names[static_cast<size_t>(i)] == s) return static_cast<E>(i);
  return last;
}

json::Json numbers(const std::vector<double>& v) {
  json::Json a = json::Json::array();
  for (double x : v) a.push_back(x);
  return a;
}

}  // namespace

namespace {

json::Json event_json(const TimelineEvent& e) {
  json::Json j;
  j["rank"] = e.rank;
  j["task"] = e.task;
  j["stream"] = e.stream;
  j["kind"] = std::string(task_kind_name(e.kind));
  j["start_s"] = e.start_s;
  j["end_s"] = e.end_s;
  j["bytes"] = e.bytes;
  j["flops"] = e.flops;
  j["label"] = e.label;
  j["phase"] = std::string(phase_name(e.phase));
  j["purpose"] = std::string(comm_purpose_name(e.purpose));
  return j;
}

// Everything but the events, in the document's key order ("events" comes last).
json::Json timeline_head(const Timeline& t) {
  json::Json doc;
  doc["schema_version"] = kTimelineSchema;
  doc["source"] = t.source;
  doc["step_time_s"] = t.step_time_s;
  doc["streams"] = t.streams;
  doc["peak_memory_bytes"] = numbers(t.peak_memory_bytes);
  doc["meta"] = t.meta.is_null() ? json::Json::object() : t.meta;
  return doc;
}

// Streams `head` (an object) with one more array member `key` whose elements `each` emits one
// by one: byte for byte what json::dump gives for the whole document, without building it.
template <class Each>
void stream_document(std::ostream& out, const json::Json& head, const std::string& key, bool key_first, Each each) {
  const std::string head_text = head.dump(1);  // "{\n ...\n}" (or "{}")
  bool first = true;
  auto element = [&](const json::Json& j) {
    out << (first ? "[\n  " : ",\n  ") << json::dump_nested(j, 2);
    first = false;
  };
  auto array = [&] {
    out << " " << json::Json(key).dump() << ": ";
    each(element);
    out << (first ? "[]" : "\n ]");
  };
  if (head.empty()) {
    out << "{\n";
    array();
    out << "\n}\n";
  } else if (key_first) {
    out << "{\n";
    array();
    out << ",\n" << head_text.substr(2) << "\n";  // the head's members after "{\n"
  } else {
    out << head_text.substr(0, head_text.size() - 2) << ",\n";  // without "\n}"
    array();
    out << "\n}\n";
  }
}

}  // namespace

void for_each_event(const Timeline& t, const std::function<void(const TimelineEvent&)>& fn) {
  if (t.aliases.empty()) {
    for (const TimelineEvent& e : t.events) fn(e);
    return;
  }
  std::map<int, std::pair<size_t, size_t>> stored;  // rank -> [begin, end) in t.events
  for (size_t i = 0; i < t.events.size(); ++i) {
    auto [it, fresh] = stored.try_emplace(t.events[i].rank, i, i + 1);
    if (!fresh) it->second.second = i + 1;
  }
  size_t next_alias = 0;
  auto emit_aliases_before = [&](int rank) {
    for (; next_alias < t.aliases.size() && t.aliases[next_alias].rank < rank; ++next_alias) {
      const RankAlias& a = t.aliases[next_alias];
      auto src = stored.find(a.source);
      if (src == stored.end()) continue;  // the source rank has no events
      for (size_t i = src->second.first; i < src->second.second; ++i) {
        TimelineEvent copy = t.events[i];
        copy.rank = a.rank;
        fn(copy);
      }
    }
  };
  for (const auto& [rank, range] : stored) {
    emit_aliases_before(rank);
    for (size_t i = range.first; i < range.second; ++i) fn(t.events[i]);
  }
  emit_aliases_before(std::numeric_limits<int>::max());
}

json::Json to_json(const Timeline& t) {
  json::Json doc = timeline_head(t);
  json::Json events = json::Json::array();
  for_each_event(t, [&](const TimelineEvent& e) { events.push_back(event_json(e)); });
  doc["events"] = std::move(events);
  return doc;
}

Timeline timeline_from_json(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  const int64_t schema = r.field("schema_version").as_int();
  if (schema != kTimelineSchema)
    throw r.field("schema_version").error("unsupported schema_version " + std::to_string(schema))
        .hint("this build reads timelines of schema_version 1");
  Timeline t;
  t.source = r.field("source").as_string();
  t.step_time_s = r.field("step_time_s").as_nonnegative();
  for (const json::Reader& s : r.field("streams").items()) t.streams.push_back(s.as_string());
  for (const json::Reader& m : r.field("peak_memory_bytes").items()) t.peak_memory_bytes.push_back(m.as_nonnegative());
  if (auto meta = r.optional_field("meta")) {
    t.meta = meta->value();
    meta->entries();  // free-form: mark everything read
  }
  const auto events = r.field("events").items();
  t.events.reserve(events.size());
  for (const json::Reader& er : events) {
    TimelineEvent e;
    e.rank = static_cast<int>(er.field("rank").as_nonnegative_int());
    e.task = static_cast<int>(er.field("task").as_nonnegative_int());
    e.stream = static_cast<int>(er.field("stream").as_nonnegative_int());
    e.kind = parse_enum(er.field("kind"), TaskKind::free, task_kind_name);
    e.start_s = er.field("start_s").as_number();
    e.end_s = er.field("end_s").as_number();
    if (e.end_s < e.start_s) throw er.field("end_s").error("end_s is before start_s");
    e.bytes = er.number_or("bytes", 0);
    e.flops = er.number_or("flops", 0);
    e.label = er.field_or("label", "");
    if (auto p = er.optional_field("phase")) e.phase = parse_enum(*p, Phase::none, phase_name);
    if (auto p = er.optional_field("purpose")) e.purpose = parse_enum(*p, CommPurpose::none, comm_purpose_name);
    er.finish();
    t.events.push_back(std::move(e));
  }
  r.finish();
  return t;
}

void write_timeline_file(const std::string& path, const Timeline& timeline) {
  json::write_stream_file(path, [&](std::ostream& out) {
    stream_document(out, timeline_head(timeline), "events", false, [&](auto& element) {
      for_each_event(timeline, [&](const TimelineEvent& e) { element(event_json(e)); });
    });
  });
}

Timeline read_timeline_file(const std::string& path) { return timeline_from_json(json::parse_file(path), path); }

// One process per rank ("rank 3"), one thread per stream; tasks with a duration as complete
// events; alloc/free as a counter of the rank's live transient bytes. Each trace event goes to
// `emit` as it is made.
namespace {

template <class Emit>
void chrome_trace_events(const Timeline& t, Emit&& emit) {
  constexpr double kUs = 1e6;
  std::map<int, std::vector<int>> streams_of_rank;  // ordered: deterministic metadata
  for_each_event(t, [&](const TimelineEvent& e) {
    auto& s = streams_of_rank[e.rank];
    if (std::find(s.begin(), s.end(), e.stream) == s.end()) s.push_back(e.stream);
  });
  for (auto& [rank, streams] : streams_of_rank) {
    std::sort(streams.begin(), streams.end());
    emit({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    emit({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
    for (int s : streams) {
      const std::string name =
          s < static_cast<int>(t.streams.size()) ? t.streams[static_cast<size_t>(s)] : "stream " + std::to_string(s);
      emit({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", s}, {"args", {{"name", name}}}});
      emit({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", s}, {"args", {{"sort_index", s}}}});
    }
  }
  // Memory counters need the alloc/free events of a rank in time order.
  std::vector<TimelineEvent> mem;
  for_each_event(t, [&](const TimelineEvent& e) {
    if (e.kind == TaskKind::alloc || e.kind == TaskKind::free) {
      mem.push_back(e);
      return;
    }
    std::string name = e.label.empty() ? std::string(task_kind_name(e.kind)) : e.label;
    std::string cat(task_kind_name(e.kind));
    if (e.purpose != CommPurpose::none) cat.append(",").append(comm_purpose_name(e.purpose));
    json::Json args = {{"task", e.task}, {"phase", std::string(phase_name(e.phase))}};
    if (e.bytes > 0) args["bytes"] = e.bytes;
    if (e.flops > 0) args["flops"] = e.flops;
    emit({{"name", name}, {"cat", cat}, {"ph", "X"}, {"ts", e.start_s * kUs},
          {"dur", (e.end_s - e.start_s) * kUs}, {"pid", e.rank}, {"tid", e.stream}, {"args", args}});
  });
  std::stable_sort(mem.begin(), mem.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    return a.rank < b.rank || (a.rank == b.rank && (a.start_s < b.start_s || (a.start_s == b.start_s && a.task < b.task)));
  });
  double live = 0;
  int rank = -1;
  for (const TimelineEvent& e : mem) {
    if (e.rank != rank) rank = e.rank, live = 0;
    live += e.kind == TaskKind::alloc ? e.bytes : -e.bytes;
    emit({{"name", "transient memory"}, {"ph", "C"}, {"ts", e.start_s * kUs}, {"pid", e.rank}, {"args", {{"bytes", live}}}});
  }
}

json::Json chrome_trace_tail(const Timeline& t) {
  json::Json doc;
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"source", t.source}, {"step_time_s", t.step_time_s}};
  return doc;
}

}  // namespace

json::Json chrome_trace(const Timeline& t) {
  json::Json events = json::Json::array();
  chrome_trace_events(t, [&](json::Json j) { events.push_back(std::move(j)); });
  json::Json doc;
  doc["traceEvents"] = std::move(events);
  const json::Json tail = chrome_trace_tail(t);  // items() refers into it: keep it alive
  for (const auto& [key, value] : tail.items()) doc[key] = value;
  return doc;
}

void write_chrome_trace_file(const std::string& path, const Timeline& timeline) {
  json::write_stream_file(path, [&](std::ostream& out) {
    stream_document(out, chrome_trace_tail(timeline), "traceEvents", true, [&](auto& element) {
      chrome_trace_events(timeline, [&](const json::Json& j) { element(j); });
    });
  });
}

}  // namespace trainplan::plan
