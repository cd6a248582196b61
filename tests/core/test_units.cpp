#include <cmath>

#include "test_support.hpp"
#include "trainplan/core/units.hpp"

using namespace trainplan;
using units::Dimension;

TEST_CASE("units: bytes use decimal and binary prefixes, b is bits", "[core]") {
  CHECK(units::parse("80GiB", Dimension::bytes) == 80.0 * 1073741824.0);
  CHECK(units::parse("40GB", Dimension::bytes) == 40e9);
  CHECK(units::parse("512 MiB", Dimension::bytes) == 512.0 * 1048576.0);
  CHECK(units::parse("8Gb", Dimension::bytes) == 1e9);
  CHECK(units::parse("1024", Dimension::bytes) == 1024.0);
}

TEST_CASE("units: bandwidth in bytes or bits per second", "[core]") {
  CHECK(units::parse("450GBps", Dimension::bandwidth) == 450e9);
  CHECK(units::parse("450GB/s", Dimension::bandwidth) == 450e9);
  CHECK(units::parse("100Gbps", Dimension::bandwidth) == 12.5e9);
  CHECK(units::parse("400 Gb/s", Dimension::bandwidth) == 50e9);
}

TEST_CASE("units: durations, FLOP rates, counts and ratios", "[core]") {
  CHECK(units::parse("2us", Dimension::duration) == Approx(2e-6));
  CHECK(units::parse("1.5ms", Dimension::duration) == Approx(1.5e-3));
  CHECK(units::parse("10min", Dimension::duration) == 600.0);
  CHECK(units::parse("2h", Dimension::duration) == 7200.0);
  CHECK(units::parse("312TFLOPS", Dimension::flops_rate) == 312e12);
  CHECK(units::parse("989 TFLOP/s", Dimension::flops_rate) == 989e12);
  CHECK(units::parse("300e9", Dimension::count) == 300e9);
  CHECK(units::parse("300B", Dimension::count) == 300e9);
  CHECK(units::parse("1.5T", Dimension::count) == 1.5e12);
  CHECK(units::parse("30%", Dimension::ratio) == Approx(0.3));
}

TEST_CASE("units: unknown units and non-numbers are errors that list the accepted units", "[core]") {
  REQUIRE_ERROR_CONTAINS(units::parse("80GiBs", Dimension::bytes), "unknown unit \"GiBs\"");
  REQUIRE_ERROR_CONTAINS(units::parse("fast", Dimension::bandwidth), "must start with a number");
  REQUIRE_ERROR_CONTAINS(units::parse("3 parsecs", Dimension::duration), "use one of: ns, us");
  REQUIRE_ERROR_CONTAINS(units::parse("450GB", Dimension::bandwidth), "unknown unit");
}

TEST_CASE("units: formatting keeps three significant digits", "[core]") {
  CHECK(units::format_bytes(80.0 * 1073741824.0) == "80.0 GiB");
  CHECK(units::format_bandwidth(450e9) == "450 GB/s");
  CHECK(units::format_duration(1.25e-3) == "1.25 ms");
  CHECK(units::format_duration(5400) == "90.0 min");
  CHECK(units::format_flops_rate(312e12) == "312 TFLOP/s");
  CHECK(units::format_count(174.6e9) == "175B");
  CHECK(units::format_count(6.74e9) == "6.74B");
  CHECK(units::format_usd(1234567.4) == "$1,234,567");
  CHECK(units::format_usd(3.5) == "$3.50");
}
