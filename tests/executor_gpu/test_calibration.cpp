// Calibration helpers: the catalog GPU of a device, the nccl-tests bus-bandwidth factors, and
// (with a GPU) a quick calibration run whose table the simulator reads.
#include "gpu_test_util.hpp"
#include "trainplan/executor/cuda_benchmarks.hpp"
#include "trainplan/executor/nccl_communicator.hpp"
#if TRAINPLAN_TEST_WITH_SIMULATOR
#include "trainplan/simulator/compute_model.hpp"
#endif

using namespace trainplan;
using namespace trainplan::executor;

TEST_CASE("calibration: devices map to catalog GPUs by compute capability and memory", "[host]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  struct Case {
    const char* device;
    const char* cc;
    double memory_bytes;
    const char* want;
  };
  // Names and sizes as cudaGetDeviceProperties reports them.
  for (const Case& c : {Case{"NVIDIA H100 80GB HBM3", "9.0", 85.0e9, "H100-SXM5-80GB"},
                        Case{"NVIDIA H200", "9.0", 150.0e9, "H200-SXM-141GB"},
                        Case{"Tesla T4", "7.5", 15.6e9, "T4"},
                        Case{"NVIDIA A100-SXM4-40GB", "8.0", 42.4e9, "A100-SXM4-40GB"},
                        Case{"NVIDIA A100-SXM4-80GB", "8.0", 85.1e9, "A100-SXM4-80GB"},
                        Case{"NVIDIA A10G", "8.6", 23.7e9, "A10G"},
                        Case{"NVIDIA L4", "8.9", 23.7e9, "L4"},
                        Case{"NVIDIA L40S", "8.9", 48.3e9, "L40S"},
                        Case{"Tesla V100-SXM2-32GB", "7.0", 34.1e9, "V100-SXM2-32GB"}}) {
    INFO(c.device);
    const hw::GpuSpec* g = match_catalog_gpu(cat, c.device, c.cc, c.memory_bytes);
    REQUIRE(g != nullptr);
    CHECK(g->name == c.want);
  }
  CHECK(match_catalog_gpu(cat, "NVIDIA GeForce GTX 1080", "6.1", 8.5e9) == nullptr);
}

TEST_CASE("calibration: bus bandwidth factors are the nccl-tests formulas", "[host]") {
  CHECK(nccl_bus_factor("all_reduce", 8) == Approx(2.0 * 7.0 / 8.0));
  CHECK(nccl_bus_factor("all_gather", 8) == Approx(7.0 / 8.0));
  CHECK(nccl_bus_factor("reduce_scatter", 4) == Approx(3.0 / 4.0));
  CHECK(nccl_bus_factor("broadcast", 16) == 1.0);
  CHECK(nccl_bus_factor("all_reduce", 1) == 0.0);
  REQUIRE_ERROR_CONTAINS(nccl_bus_factor("alltoall", 2), "unknown collective \"alltoall\"");
  CHECK(model_flops_utilization(989e12 * 0.5, 1.0, 989e12) == Approx(0.5));
}

TEST_CASE("calibration: a quick run on this GPU writes a table the simulator reads", "[cuda]") {
  auto gpu = make_backend("cuda");
  CalibrationOptions o;
  o.models = {"gpt2-124m", "llama2-7b"};
  o.micro_batch = 1;
  o.max_seq_len = 128;
  o.warmup = 1;
  o.repeats = 2;
  const CalibrationResult r = run_compute_calibration(*gpu, o);
  INFO(json::dump(r.table));
  REQUIRE(r.table["entries"].size() > 4);
  CHECK(r.measurements["points"].size() >= r.table["entries"].size() - 1);
  for (const auto& e : r.table["entries"]) {
    if (e.contains("duration_s")) CHECK(e["duration_s"].get<double>() > 0);
    if (e.contains("compute_efficiency")) CHECK(e["compute_efficiency"].get<double>() > 0);
  }
#if TRAINPLAN_TEST_WITH_SIMULATOR
  const sim::CalibrationTable table = sim::CalibrationTable::from_json(r.table, "quick calibration");
  CHECK(table.entries().size() == r.table["entries"].size());
#endif
}

TEST_CASE("calibration: the NCCL benchmark reports algbw and busbw per size on the GPUs present", "[cuda][nccl]") {
  const int n = std::min(cuda_device_count(), 8);
  std::vector<json::Json> tables(static_cast<size_t>(n));
  run_rank_threads(n, [&](int rank, Rendezvous& store) {
    auto be = make_backend("cuda");
    auto comm = make_nccl_communicator(store, rank, n, *be, be->default_stream());
    NcclBenchOptions o;
    o.max_bytes = int64_t{1} << 16;
    o.iterations = 2;
    tables[static_cast<size_t>(rank)] = run_nccl_benchmark(*comm, *be, o, "test");
  });
  const json::Json& t = tables.front();
  CHECK(t["ranks"].get<int>() == n);
  CHECK(t["entries"].size() == 4 * 7);  // 4 collectives x 1 KiB .. 64 KiB
  for (const auto& e : t["entries"]) {
    CHECK(e["duration_s"].get<double>() > 0);
    CHECK(e["busbw_bytes_per_s"].get<double>() ==
          Approx(e["algbw_bytes_per_s"].get<double>() * nccl_bus_factor(e["collective"].get<std::string>(), n)));
  }
}
