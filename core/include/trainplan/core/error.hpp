// File: trainplan/core/error.hpp
//
// The one error type for users (bad input files, CLI arguments, infeasible requests) and the
// assert for bugs. User errors carry where they happened and how to fix it:
//
//   throw trainplan::Error("must be a positive integer, got -4")
//       .at("models/catalog/gpt3.json", "/layers")
//       .hint("layers counts transformer blocks, e.g. 96 for GPT-3 175B");
//
// prints (via Error::what) as
//   models/catalog/gpt3.json: /layers: must be a positive integer, got -4 — layers counts ...
//
// An invariant only a bug can break is TP_ASSERT(cond), which aborts with file:line in every
// build type (NDEBUG does not remove it).
#pragma once

#include <stdexcept>
#include <string>

namespace trainplan {

class Error : public std::exception {
 public:
  explicit Error(std::string message);

  /// Sets the file (path as the user wrote it) and the JSON pointer ("/a/0/b"); either may
  /// be empty. Returns *this so it can be chained on a temporary before `throw`.
  Error& at(std::string file, std::string pointer = {});
  /// Sets the JSON pointer only, keeping the file.
  Error& at_pointer(std::string pointer);
  /// Adds a hint: what the user can do to fix it.
  Error& hint(std::string hint);

  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }
  const std::string& message() const { return message_; }
  const std::string& hint_text() const { return hint_; }

  /// "<file>: <pointer>: <message> — <hint>", with the missing parts left out.
  const char* what() const noexcept override { return formatted_.c_str(); }

 private:
  void format();
  std::string message_;
  std::string file_;
  std::string pointer_;
  std::string hint_;
  std::string formatted_;
};

namespace detail {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);
}  // namespace detail

}  // namespace trainplan

/// Aborts with the expression and file:line when an invariant is broken. For bugs only.
#define TP_ASSERT(cond)                                                        \
  do {                                                                         \
    if (!(cond)) ::trainplan::detail::assert_fail(#cond, __FILE__, __LINE__, ""); \
  } while (0)
#define TP_ASSERT_MSG(cond, msg)                                                  \
  do {                                                                            \
    if (!(cond)) ::trainplan::detail::assert_fail(#cond, __FILE__, __LINE__, msg); \
  } while (0)
