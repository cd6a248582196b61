// File: trainplan/core/json.hpp
//
// Reading JSON input with locations, and writing JSON output deterministically.
//
// Input: `Reader` is a view on one JSON value that knows its file and JSON pointer, so every
// error names both. Object fields are read by name; `finish()` then rejects any field that was
// not read, with its pointer and the closest known name:
//
//   json::Json doc = json::parse_file("plan.json");
//   json::Reader r(doc, "plan.json");
//   int tp = r.field("tp").as_positive_int();          // error: plan.json: /tp: must be ...
//   double bw = r.field("bandwidth").as_quantity(units::Dimension::bandwidth);  // "450GBps"
//   std::string s = r.field_or("schedule", "1f1b");
//   r.finish();                                        // error: plan.json: /tpp: unknown field
//
// Output: `Json` keeps insertion order; `dump()` writes it with 1-space indentation and a
// trailing newline, so the same object always gives the same bytes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::json {

using Json = nlohmann::ordered_json;

/// Reads and parses a file. Errors: missing/unreadable file, syntax error (with line and
/// column). `display_name` is how the file is named in errors (defaults to `path`).
Json parse_file(const std::string& path, const std::string& display_name = {});

/// Parses text that came from `name` (a file name or a description such as "<stdin>").
Json parse_text(std::string_view text, const std::string& name);

/// Serializes deterministically (1-space indent, trailing newline).
std::string dump(const Json& value);

/// Writes `value` to `path` with output::write_file: atomically for regular files, directly to
/// "-" (stdout), character devices and FIFOs; write errors throw Error.
void write_file(const std::string& path, const Json& value);
/// Writes text to `path` the same way.
void write_text_file(const std::string& path, std::string_view text);
/// Reads a whole text file (at most limits::kMaxInputFileBytes); throws Error naming the
/// file if it is a directory, cannot be read or is too large.
std::string read_text_file(const std::string& path);

/// Escapes one reference token for a JSON pointer ("~" -> "~0", "/" -> "~1").
std::string escape_pointer_token(std::string_view token);

class Reader {
 public:
  Reader(const Json& value, std::string file, std::string pointer = "");

  const Json& value() const { return *value_; }
  const std::string& file() const { return file_; }
  /// The JSON pointer of this value; "" is the root, shown as "/" in messages.
  const std::string& pointer() const { return pointer_; }

  /// An Error located at this value.
  Error error(const std::string& message) const;

  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }
  bool is_number() const { return value_->is_number(); }
  bool is_null() const { return value_->is_null(); }

  // ---- objects -------------------------------------------------------------------------
  /// The field `key`; it must exist (error: "missing required field").
  Reader field(std::string_view key) const;
  /// The field `key` if present and not null.
  std::optional<Reader> optional_field(std::string_view key) const;
  bool has(std::string_view key) const;
  /// Convenience for optional scalar fields.
  std::string field_or(std::string_view key, const std::string& fallback) const;
  double number_or(std::string_view key, double fallback) const;
  int64_t int_or(std::string_view key, int64_t fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;
  double quantity_or(std::string_view key, units::Dimension dim, double fallback) const;
  /// All entries of an object, in document order. Marks them all as read.
  std::vector<std::pair<std::string, Reader>> entries() const;
  /// Marks a field as read without reading it (e.g. comments, "source" notes).
  void ignore(std::string_view key) const;
  /// Errors on the first field of this object that was never read, suggesting the closest
  /// known name. Call after reading all fields.
  void finish() const;

  // ---- arrays --------------------------------------------------------------------------
  std::vector<Reader> items() const;
  size_t size() const;

  // ---- scalars -------------------------------------------------------------------------
  std::string as_string() const;
  bool as_bool() const;
  // Numbers are finite (the parser refuses 1e309) and never a negative zero. Integers are
  // range-checked before they are returned, so a cast to `int` of a default-range result is
  // safe: by default at most limits::kMaxInt (2^31 - 1). Errors name the range.
  double as_number() const;
  double as_number_in(double min, double max) const;
  double as_positive(double max = std::numeric_limits<double>::max()) const;     // > 0
  double as_nonnegative(double max = std::numeric_limits<double>::max()) const;  // >= 0
  int64_t as_int(int64_t min = -limits::kMaxInt, int64_t max = limits::kMaxInt) const;
  int64_t as_positive_int(int64_t max = limits::kMaxInt) const;     // 1..max
  int64_t as_nonnegative_int(int64_t max = limits::kMaxInt) const;  // 0..max
  /// A number (already SI base units) or a string with a unit, e.g. "450GBps"; in
  /// [0, max], where max <= 0 means the dimension's limit (units::max_of).
  double as_quantity(units::Dimension dim, double max = 0) const;
  /// One of `names` (exact match); error lists them and suggests the closest.
  std::string as_choice(const std::vector<std::string>& names) const;

 private:
  Reader child(std::string_view key, const Json& value) const;
  void mark(std::string_view key) const;
  void expect_object() const;
  const Json* value_;
  std::string file_;
  std::string pointer_;
  std::shared_ptr<std::set<std::string, std::less<>>> read_keys_;
};

}  // namespace trainplan::json
