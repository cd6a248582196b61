// Checked numbers: every integer or real from a file or a flag is range-checked before use.
#include <cmath>
#include <limits>

#include "test_support.hpp"
#include "trainplan/core/checked.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/core/units.hpp"

using namespace trainplan;

TEST_CASE("checked: parse_int reads plain, exponent and suffix forms exactly", "[core]") {
  CHECK(checked::parse_int("42", 0, 100) == 42);
  CHECK(checked::parse_int(" 7 ", 0, 100) == 7);
  CHECK(checked::parse_int("-3", -10, 10) == -3);
  CHECK(checked::parse_int("1e3", 0, 100000) == 1000);
  CHECK(checked::parse_int("4k", 0, 100000) == 4000);
  CHECK(checked::parse_int("2M", 0, 10000000) == 2000000);
  CHECK(checked::parse_int("9223372036854775807", 0, std::numeric_limits<int64_t>::max()) == std::numeric_limits<int64_t>::max());
}

TEST_CASE("checked: parse_int refuses negatives, fractions, junk and values beyond the range", "[core]") {
  REQUIRE_ERROR_CONTAINS(checked::parse_int("-1", 0, 100), "must not be negative, got -1");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("-1e3", 1, 100), "must not be negative");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("0", 1, 100), "must be between 1 and 100, got 0");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("1e6", 1, 131072), "must be between 1 and 131072, got 1e6");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("1e309", 1, 100), "must be between 1 and 100");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("18446744073709551615", 0, 100), "must be between 0 and 100");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("4294967312", 1, limits::kMaxInt), "must be between 1 and 2147483647");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("1.5", 0, 100), "must be a whole number");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("two", 0, 100), "must be a whole number, got \"two\"");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("", 0, 100), "must be a whole number");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("nan", 0, 100), "must be");
  REQUIRE_ERROR_CONTAINS(checked::parse_int("3x", 0, 100), "suffixes k, M, B, T");
}

TEST_CASE("checked: parse_real and in_range refuse inf, NaN and out-of-range values and never return -0", "[core]") {
  CHECK(checked::parse_real("0.25", 0, 1) == 0.25);
  CHECK(!std::signbit(checked::parse_real("-0", 0, 1)));
  CHECK(!std::signbit(checked::in_range(-0.0, 0.0, 1.0)));
  CHECK(checked::parse_real("1e-400", 0, 1) == 0.0);  // underflow reads as zero
  REQUIRE_ERROR_CONTAINS(checked::parse_real("1e400", 0, 1), "must be between 0 and 1");
  REQUIRE_ERROR_CONTAINS(checked::parse_real("-0.5", 0, 1), "must not be negative");
  REQUIRE_ERROR_CONTAINS(checked::parse_real("inf", 0, 1), "must be a finite number");
  REQUIRE_ERROR_CONTAINS(checked::parse_real("nan", 0, 1), "must be a finite number");
  REQUIRE_ERROR_CONTAINS(checked::parse_real("0.5x", 0, 1), "must be a number, got \"0.5x\"");
  REQUIRE_ERROR_CONTAINS(checked::in_range(std::numeric_limits<double>::infinity(), 0.0, 1.0), "finite");
}

TEST_CASE("checked: to_int converts computed reals only when they fit", "[core]") {
  CHECK(checked::to_int(2.5, 0, 10, "steps", true) == 3);
  CHECK(checked::to_int(2.5, 0, 10, "steps") == 2);
  REQUIRE_ERROR_CONTAINS(checked::to_int(1e20, 1, limits::kMaxSteps, "steps"), "steps would be 1e+20");
  REQUIRE_ERROR_CONTAINS(checked::to_int(std::nan(""), 1, 10, "steps"), "steps would be nan");
  REQUIRE_ERROR_CONTAINS(checked::to_int(std::numeric_limits<double>::infinity(), 1, 10, "steps"), "outside the range");
  REQUIRE_ERROR_CONTAINS(checked::to_int(0.0, 1, 10, "steps", true), "steps would be 0");
  REQUIRE_ERROR_CONTAINS(checked::to_int(1e20, 1, 10, "steps", false, "--tokens and --batch"), "check --tokens and --batch");
}

TEST_CASE("checked: narrow and multiply never wrap", "[core]") {
  CHECK(checked::narrow<int>(int64_t{1} << 30) == (1 << 30));
  REQUIRE_ERROR_CONTAINS(checked::narrow<int>((int64_t{1} << 32) + 16), "must be between");
  REQUIRE_ERROR_CONTAINS(checked::narrow<unsigned>(-1), "must not be negative");
  CHECK(checked::multiply(1024, 128, limits::kMaxGpus, "dp*tp") == 131072);
  REQUIRE_ERROR_CONTAINS(checked::multiply(int64_t{1} << 40, int64_t{1} << 40, limits::kMaxGpus, "dp*tp"), "dp*tp = ");
  REQUIRE_ERROR_CONTAINS(checked::multiply(65536, 4, limits::kMaxGpus, "dp*tp"), "is more than 131072");
}

TEST_CASE("checked: quantities beyond a dimension's limit are refused instead of overflowing to inf", "[core]") {
  REQUIRE_ERROR_CONTAINS(units::parse("1e308GB", units::Dimension::bytes), "is too large for a size in bytes");
  REQUIRE_ERROR_CONTAINS(units::parse("1e309", units::Dimension::count), "is too large for a count");
  REQUIRE_ERROR_CONTAINS(units::parse("1e20s", units::Dimension::duration), "is too large for a duration");
  REQUIRE_ERROR_CONTAINS(units::parse("inf", units::Dimension::count), "is too large");
  REQUIRE_ERROR_CONTAINS(units::parse("nan", units::Dimension::count), "is not a number");
  CHECK(!std::signbit(units::parse("-0", units::Dimension::count)));
  CHECK(units::parse("300B", units::Dimension::count) == 300e9);
  CHECK(units::max_of(units::Dimension::duration) == limits::kMaxSeconds);
}

TEST_CASE("checked: JSON integers are range-checked before any cast", "[core]") {
  auto doc = json::parse_text(R"({"dp": 4294967312, "big": 18446744073709551615, "f": 1e300, "neg": -1, "ok": 8,
                                   "frac": 2.5, "huge_float": 3e9})",
                              "p.json");
  json::Reader r(doc, "p.json");
  REQUIRE_ERROR_CONTAINS(r.field("dp").as_positive_int(), "p.json: /dp: must be at most 2147483647, got 4294967312");
  REQUIRE_ERROR_CONTAINS(r.field("big").as_int(), "p.json: /big: must be between");
  REQUIRE_ERROR_CONTAINS(r.field("f").as_int(), "p.json: /f: must be between");
  REQUIRE_ERROR_CONTAINS(r.field("neg").as_nonnegative_int(), "p.json: /neg: must not be negative");
  REQUIRE_ERROR_CONTAINS(r.field("ok").as_positive_int(4), "p.json: /ok: must be at most 4, got 8");
  REQUIRE_ERROR_CONTAINS(r.field("frac").as_int(), "p.json: /frac: must be an integer, got 2.5");
  REQUIRE_ERROR_CONTAINS(r.field("huge_float").as_positive_int(), "p.json: /huge_float: must be at most 2147483647");
  CHECK(r.field("ok").as_positive_int() == 8);
  REQUIRE_ERROR_CONTAINS(r.field("f").as_quantity(units::Dimension::bytes), "p.json: /f: must be at most");
  REQUIRE_ERROR_CONTAINS(r.field("f").as_positive(1e6), "p.json: /f: must be between");
}
