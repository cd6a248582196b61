#include "trainplan/core/json.hpp"
#include "trainplan/core/json_stream.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "trainplan/core/strings.hpp"

namespace trainplan::json {
namespace {

std::string type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

std::string show(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Line and column (1-based) of a byte offset.
std::pair<size_t, size_t> line_col(std::string_view text, size_t offset) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("is a directory, not a file").at(path).hint("give the path of a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot open the file (does it exist and is it readable?)").at(path)
        .hint("check the path; relative paths are taken from the current directory");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json parse_text(std::string_view text, const std::string& name) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based position of the error.
    auto [line, col] = line_col(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    // nlohmann messages: "[json.exception.parse_error.101] parse error at line 3, column 5:
    // syntax error while parsing object - unexpected end of input; expected '}'"
    auto pos = what.find("syntax error");
    std::string detail = pos != std::string::npos ? what.substr(pos) : what;
    bool truncated = e.byte >= text.size();
    throw Error(fmt::format("invalid JSON at line {}, column {}: {}", line, col, detail))
        .at(name)
        .hint(truncated ? "the file ends early: is it truncated or missing a closing bracket?"
                        : "fix the JSON syntax at that position (trailing commas and comments are not allowed)");
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number beyond double range, e.g. 1e309 ("number overflow parsing '1e309'").
    std::string what = e.what();
    auto pos = what.find("number overflow");
    throw Error(pos != std::string::npos ? what.substr(pos) + ": beyond the range of a double" : what)
        .at(name)
        .hint("numbers must lie within +-1.8e308");
  }
}

Json parse_file(const std::string& path, const std::string& display_name) {
  std::string text = read_text_file(path);
  return parse_text(text, display_name.empty() ? path : display_name);
}

std::string dump(const Json& value) { return value.dump(1) + "\n"; }

void write_text_file(const std::string& path, std::string_view text) {
  write_stream_file(path, [&](std::ostream& out) { out.write(text.data(), static_cast<std::streamsize>(text.size())); });
}

void write_stream_file(const std::string& path, const std::function<void(std::ostream& out)>& generate) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path tmp = target;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error("cannot write the file").at(path).hint("check that the directory exists and is writable");
    try {
      generate(out);
    } catch (...) {
      out.close();
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw;
    }
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw Error("write failed (disk full?)").at(path);
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) throw Error("cannot replace the file: " + ec.message()).at(path);
}

std::string dump_nested(const Json& value, int depth) {
  const std::string text = value.dump(1);
  std::string indent(static_cast<size_t>(depth) + 1, ' ');
  indent[0] = '\n';
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (char c : text) {
    if (c == '\n') out += indent;
    else out += c;
  }
  return out;
}

void write_file(const std::string& path, const Json& value) { write_text_file(path, dump(value)); }

std::string escape_pointer_token(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// ---- Reader ------------------------------------------------------------------------------

Reader::Reader(const Json& value, std::string file, std::string pointer)
    : value_(&value),
      file_(std::move(file)),
      pointer_(std::move(pointer)),
      read_keys_(std::make_shared<std::set<std::string, std::less<>>>()) {}

Error Reader::error(const std::string& message) const {
  Error e(message);
  e.at(file_, pointer_.empty() ? "/" : pointer_);
  return e;
}

void Reader::expect_object() const {
  if (!value_->is_object())
    throw error(fmt::format("must be an object, got {}", type_name(*value_)))
        .hint("write {\"field\": value, ...}");
}

Reader Reader::child(std::string_view key, const Json& value) const {
  return Reader(value, file_, pointer_ + "/" + escape_pointer_token(key));
}

void Reader::mark(std::string_view key) const { read_keys_->emplace(key); }

Reader Reader::field(std::string_view key) const {
  expect_object();
  auto it = value_->find(std::string(key));
  mark(key);
  if (it == value_->end()) {
    throw Error(fmt::format("missing required field \"{}\"", key))
        .at(file_, pointer_.empty() ? "/" : pointer_)
        .hint(fmt::format("add \"{}\" to this object", key));
  }
  return child(key, *it);
}

std::optional<Reader> Reader::optional_field(std::string_view key) const {
  expect_object();
  mark(key);
  auto it = value_->find(std::string(key));
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return child(key, *it);
}

bool Reader::has(std::string_view key) const {
  return value_->is_object() && value_->contains(std::string(key)) &&
         !(*value_)[std::string(key)].is_null();
}

std::string Reader::field_or(std::string_view key, const std::string& fallback) const {
  auto f = optional_field(key);
  return f ? f->as_string() : fallback;
}
double Reader::number_or(std::string_view key, double fallback) const {
  auto f = optional_field(key);
  return f ? f->as_number() : fallback;
}
int64_t Reader::int_or(std::string_view key, int64_t fallback) const {
  auto f = optional_field(key);
  return f ? f->as_int() : fallback;
}
bool Reader::bool_or(std::string_view key, bool fallback) const {
  auto f = optional_field(key);
  return f ? f->as_bool() : fallback;
}
double Reader::quantity_or(std::string_view key, units::Dimension dim, double fallback) const {
  auto f = optional_field(key);
  return f ? f->as_quantity(dim) : fallback;
}

std::vector<std::pair<std::string, Reader>> Reader::entries() const {
  expect_object();
  std::vector<std::pair<std::string, Reader>> out;
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    mark(it.key());
    out.emplace_back(it.key(), child(it.key(), it.value()));
  }
  return out;
}

void Reader::ignore(std::string_view key) const { mark(key); }

void Reader::finish() const {
  if (!value_->is_object()) return;
  std::vector<std::string> known(read_keys_->begin(), read_keys_->end());
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    if (read_keys_->count(it.key())) continue;
    Error e(fmt::format("unknown field \"{}\"", it.key()));
    e.at(file_, pointer_ + "/" + escape_pointer_token(it.key()));
    std::string c = closest(it.key(), known);
    e.hint(c.empty() ? "remove it; fields allowed here: " + join(known, ", ")
                     : "did you mean \"" + c + "\"?");
    throw e;
  }
}

std::vector<Reader> Reader::items() const {
  if (!value_->is_array())
    throw error(fmt::format("must be an array, got {}", type_name(*value_))).hint("write [ ... ]");
  std::vector<Reader> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i)
    out.emplace_back((*value_)[i], file_, pointer_ + "/" + std::to_string(i));
  return out;
}

size_t Reader::size() const { return value_->size(); }

std::string Reader::as_string() const {
  if (!value_->is_string())
    throw error(fmt::format("must be a string, got {} ({})", type_name(*value_), show(*value_)))
        .hint("put the value in double quotes");
  return value_->get<std::string>();
}

bool Reader::as_bool() const {
  if (!value_->is_boolean())
    throw error(fmt::format("must be true or false, got {} ({})", type_name(*value_), show(*value_)))
        .hint("write true or false without quotes");
  return value_->get<bool>();
}

double Reader::as_number() const {
  if (!value_->is_number())
    throw error(fmt::format("must be a number, got {} ({})", type_name(*value_), show(*value_)))
        .hint("write the number without quotes");
  return value_->get<double>();
}

double Reader::as_positive() const {
  double v = as_number();
  if (!(v > 0.0)) throw error(fmt::format("must be positive, got {}", show(*value_))).hint("use a value greater than zero");
  return v;
}

double Reader::as_nonnegative() const {
  double v = as_number();
  if (!(v >= 0.0)) throw error(fmt::format("must not be negative, got {}", show(*value_))).hint("use zero or a positive value");
  return v;
}

int64_t Reader::as_int() const {
  if (!value_->is_number())
    throw error(fmt::format("must be an integer, got {} ({})", type_name(*value_), show(*value_)))
        .hint("write a whole number without quotes");
  if (value_->is_number_float()) {
    double d = value_->get<double>();
    if (d != std::floor(d) || std::fabs(d) > 9.0e15)
      throw error(fmt::format("must be an integer, got {}", show(*value_))).hint("write a whole number");
    return static_cast<int64_t>(d);
  }
  if (value_->is_number_unsigned() &&
      value_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw error("integer too large");
  return value_->get<int64_t>();
}

int64_t Reader::as_positive_int() const {
  int64_t v = as_int();
  if (v < 1) throw error(fmt::format("must be a positive integer, got {}", v)).hint("use 1 or more");
  return v;
}

int64_t Reader::as_nonnegative_int() const {
  int64_t v = as_int();
  if (v < 0) throw error(fmt::format("must not be negative, got {}", v)).hint("use 0 or more");
  return v;
}

double Reader::as_quantity(units::Dimension dim) const {
  double v = 0.0;
  if (value_->is_number()) {
    v = value_->get<double>();
  } else if (value_->is_string()) {
    try {
      v = units::parse(value_->get<std::string>(), dim);
    } catch (Error& e) {
      e.at(file_, pointer_.empty() ? "/" : pointer_);
      throw;
    }
  } else {
    throw error(fmt::format("must be {} (a number or a string with a unit), got {}",
                            units::dimension_name(dim), type_name(*value_)))
        .hint(dim == units::Dimension::bandwidth ? "write e.g. \"450GBps\"" : "write e.g. \"80GiB\" or \"2us\"");
  }
  if (!std::isfinite(v) || v < 0.0)
    throw error(fmt::format("must not be negative, got {}", show(*value_))).hint("use a value of zero or more");
  return v;
}

std::string Reader::as_choice(const std::vector<std::string>& names) const {
  std::string s = as_string();
  for (const auto& n : names)
    if (n == s) return s;
  throw error(fmt::format("unknown value \"{}\"", s))
      .hint(closest(s, names).empty() ? "use one of: " + join(names, ", ")
                                      : "did you mean \"" + closest(s, names) + "\"? (one of: " + join(names, ", ") + ")");
}

}  // namespace trainplan::json
