// File: trainplan/core/json_stream.hpp
//
// Writing large JSON documents without holding them in memory: a file written atomically from
// a generator that streams its text, and the text of one nested value as json::dump would
// print it inside a document, so a writer can emit a document's array elements one by one.
//
//   json::write_stream_file("step.trace.json", [&](std::ostream& out) {
//     out << "{\n \"events\": [";
//     ... out << (first ? "\n  " : ",\n  ") << json::dump_nested(event, 2); ...
//     out << "\n ]\n}\n";
//   });
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "trainplan/core/json.hpp"

namespace trainplan::json {

/// Writes `path` atomically (a temporary, then a rename) from a generator that streams its text
/// into `out`. A generator that throws, or a failed write, leaves no temporary behind.
void write_stream_file(const std::string& path, const std::function<void(std::ostream& out)>& generate);

/// The text json::dump gives for `value` nested `depth` levels deep in a document (each line
/// after the first indented by `depth` more spaces), without a trailing newline.
std::string dump_nested(const Json& value, int depth);

}  // namespace trainplan::json
