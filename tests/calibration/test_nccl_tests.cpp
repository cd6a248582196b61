// nccl-tests logs as calibration input (calibration/nccl_tests.hpp). Oracle: a log whose times
// come from a closed form (time = 25 us + size x 2 (n - 1) / n / 150 GB/s, n = 8,
// tests/calibration/data/all_reduce_perf-synthetic-8gpu.log): the fit recovers both numbers;
// the row layouts nccl-tests has printed (with and without the root column); and the errors.
#include <catch2/catch.hpp>

#include <string>

#include "test_support.hpp"
#include "trainplan/calibration/nccl_tests.hpp"
#include "trainplan/core/error.hpp"

using namespace trainplan;

namespace {

const std::string kHeader =
    "# nThread 1 nGpus 2 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#  Rank  0 Group  0 Pid  1 on h device  0 [0x07] NVIDIA H100 80GB HBM3\n"
    "#  Rank  1 Group  0 Pid  1 on h device  1 [0x0f] NVIDIA H100 80GB HBM3\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";

}  // namespace

TEST_CASE("nccl-tests: the synthetic all_reduce_perf log parses and the fit recovers its latency and busbw",
          "[calibration]") {
  const auto log = calibration::read_nccl_tests_log(testing::source_path("tests/calibration/data/all_reduce_perf-synthetic-8gpu.log"));
  CHECK(log.ranks == 8);
  REQUIRE(log.devices.size() == 8);
  CHECK(log.devices[3] == "NVIDIA A100-SXM4-40GB");
  REQUIRE(log.points.size() == 14);  // 8 B .. 1 GiB, x4
  CHECK(log.points.front().bytes == 8);
  CHECK(log.points.front().median_s == Approx(25e-6));
  CHECK(log.points.back().ranks == 8);
  calibration::Profile p;
  calibration::fit_nccl_tests(p, {log});
  CHECK(p.comm_latency_s == Approx(25e-6).epsilon(0.01));
  CHECK(p.comm_busbw_bytes_per_s == Approx(150e9).epsilon(0.01));
  CHECK(p.comm_link == "nccl-tests, 8 ranks");
  REQUIRE(p.fit.size() == 1);
  CHECK(p.fit[0].heldout_points == 7);
  CHECK(p.fit[0].heldout_worst_error < 0.01);
}

TEST_CASE("nccl-tests: rows with and without the root column, and what is refused", "[calibration]") {
  // 2 ranks: busbw = algbw (2 (n - 1) / n = 1). A row without root (older nccl-tests).
  const std::string ok = kHeader +
                         "     1048576        262144     float     sum      -1    30.00   34.95   34.95      0    30.00   34.95   34.95      0\n"
                         "     4194304       1048576     float     sum    100.00   41.94   41.94      0   100.00   41.94   41.94      0\n";
  const auto log = calibration::parse_nccl_tests_log(ok, "two.log");
  CHECK(log.ranks == 2);
  REQUIRE(log.points.size() == 2);
  CHECK(log.points[1].median_s == Approx(100e-6));
  CHECK(calibration::is_nccl_tests_log(ok));
  CHECK_FALSE(calibration::is_nccl_tests_log("{\"kind\": \"trainplan-bench\"}"));

  // An all_gather_perf log over 4 ranks: busbw / algbw = 3/4, not an all-reduce's 3/2.
  const std::string gather =
      "# nThread 1 nGpus 4 minBytes 1048576 maxBytes 1048576\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
      "     1048576         65536     float    none      -1    20.00   52.43   39.32      0    20.00   52.43   39.32      0\n";
  CHECK_THROWS_WITH(calibration::parse_nccl_tests_log(gather, "gather.log"),
                    Catch::Contains("gather.log") && Catch::Contains("not an all_reduce_perf log"));
  // A damaged number names its line.
  const std::string bad = kHeader + "     1048576        262144     float     sum      -1    3x.00   34.95   34.95      0    30.00   34.95   34.95      0\n";
  CHECK_THROWS_WITH(calibration::parse_nccl_tests_log(bad, "bad.log"), Catch::Contains("line 5 time") && Catch::Contains("bad.log"));
  // No ranks, no rows.
  CHECK_THROWS_WITH(calibration::parse_nccl_tests_log(
                        "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                        "     1048576        262144     float     sum      -1    30.00   34.95   34.95      0    30.00   34.95   34.95      0\n",
                        "norank.log"),
                    Catch::Contains("names no ranks"));
  CHECK_THROWS_WITH(calibration::parse_nccl_tests_log(kHeader, "empty.log"), Catch::Contains("no result rows"));
  // Logs of different rank counts are not fitted together.
  const auto eight = calibration::read_nccl_tests_log(testing::source_path("tests/calibration/data/all_reduce_perf-synthetic-8gpu.log"));
  calibration::Profile p;
  CHECK_THROWS_WITH(calibration::fit_nccl_tests(p, {eight, log}), Catch::Contains("2 ranks") && Catch::Contains("two.log"));
}
