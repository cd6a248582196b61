// Helpers shared by the test binaries.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "trainplan/core/error.hpp"

namespace trainplan::testing {

/// Bytes in a GiB.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// Path of a file in the source tree.
inline std::string source_path(const std::string& rel) { return std::string(TRAINPLAN_SOURCE_DIR) + "/" + rel; }
/// Path of a file in ../shared (read-only data that must not be copied into the project).
inline std::string shared_path(const std::string& rel) { return std::string(TRAINPLAN_SHARED_DIR) + "/" + rel; }

}  // namespace trainplan::testing

/// Checks that `expr` throws trainplan::Error whose message contains `needle`.
#define REQUIRE_ERROR_CONTAINS(expr, needle)                                          \
  do {                                                                                \
    bool thrown_ = false;                                                             \
    try {                                                                             \
      (void)(expr);                                                                   \
    } catch (const ::trainplan::Error& e_) {                                          \
      thrown_ = true;                                                                 \
      INFO("error was: " << e_.what());                                               \
      CHECK(std::string(e_.what()).find(needle) != std::string::npos);                \
    }                                                                                 \
    if (!thrown_) FAIL("expected trainplan::Error containing \"" << needle << "\""); \
  } while (0)
