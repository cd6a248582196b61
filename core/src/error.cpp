#include "trainplan/core/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace trainplan {

Error::Error(std::string message) : message_(std::move(message)) { format(); }

Error& Error::at(std::string file, std::string pointer) {
  file_ = std::move(file);
  pointer_ = std::move(pointer);
  format();
  return *this;
}

Error& Error::at_pointer(std::string pointer) {
  pointer_ = std::move(pointer);
  format();
  return *this;
}

Error& Error::hint(std::string hint) {
  hint_ = std::move(hint);
  format();
  return *this;
}

void Error::format() {
  formatted_.clear();
  if (!file_.empty()) formatted_ += file_ + ": ";
  if (!pointer_.empty()) formatted_ += pointer_ + ": ";
  formatted_ += message_;
  if (!hint_.empty()) formatted_ += " \xE2\x80\x94 " + hint_;  // em dash
}

namespace detail {
void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "trainplan: internal error: assertion `%s` failed at %s:%d%s%s\n", expr,
               file, line, msg[0] ? ": " : "", msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace trainplan
