// The hardware facts that models and the executor use besides peaks and memory: SM counts,
// cuBLAS workspaces and measured matmul rates (MAMF) live in the GPU catalog with sources.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <vector>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;
using trainplan::testing::shared_path;
using trainplan::testing::source_path;

namespace {

std::string gpus_with(const std::string& gpu, const std::string& field, const json::Json& value) {
  json::Json doc = json::Json::parse(json::read_text_file(source_path("hwprofiles/catalog/gpus.json")));
  if (value.is_null())
    doc["gpus"][gpu].erase(field);
  else
    doc["gpus"][gpu][field] = value;
  return doc.dump();
}

hw::Catalog load_gpus(const std::string& gpus_text) {
  return hw::Catalog::from_texts({{"sources.json", json::read_text_file(source_path("hwprofiles/catalog/sources.json"))},
                                  {"gpus.json", gpus_text}});
}

}  // namespace

TEST_CASE("hwprofiles: every GPU has an SM count and the cuBLAS workspace of its architecture, with sources",
          "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  for (const auto& [name, g] : cat.gpus()) {
    INFO(name);
    CHECK(g.sm_count > 0);
    if (!g.executable()) {  // Trainium: no CUDA, no cuBLAS workspace
      CHECK(g.cublas_workspace_bytes == 0);
      CHECK_FALSE(g.sources.count("cublas_workspace"));
      continue;
    }
    // cuBLAS API reference (cublasSetWorkspace): 32 MiB on Hopper (compute capability 9.x), 4 MiB
    // before; PyTorch allocates 32 MiB for every compute capability 9 and up (Blackwell: 10.0).
    CHECK(g.cublas_workspace_bytes == (std::atof(g.compute_capability.c_str()) >= 9.0 ? 32.0 : 4.0) * 1048576.0);
    for (const char* group : {"sm_count", "cublas_workspace"}) {
      REQUIRE(g.sources.count(group));
      CHECK(cat.sources().count(g.sources.at(group)));
    }
    if (!g.mamf_flops.empty()) CHECK(cat.sources().count(g.sources.at("mamf")));
  }
  // Whitepaper figures (NVIDIA A100 and H100 architecture whitepapers).
  CHECK(cat.gpu("A100-SXM4-80GB").sm_count == 108);
  CHECK(cat.gpu("H100-SXM5-80GB").sm_count == 132);
}

TEST_CASE("hwprofiles: the catalog's MAMF figures are the measured ones of ../shared/hwdata", "[hwprofiles]") {
  // reference-hardware.md §2.1 rows: "| A100-SXM4-40GB | ... | MAMF bf16 271.2 | ...".
  std::ifstream in(shared_path("hwdata/reference-hardware.md"));
  REQUIRE(in.good());
  const std::regex row(R"(^\| ([A-Za-z0-9-]+) \|.*\| MAMF bf16 ([0-9.]+) \|)");
  const hw::Catalog& cat = hw::Catalog::builtin();
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    INFO(line);
    const hw::GpuSpec& g = cat.gpu(m[1]);
    REQUIRE(g.mamf_flops.count(Precision::bf16));
    CHECK(g.mamf_flops.at(Precision::bf16) == Approx(std::stod(m[2]) * 1e12));
    ++rows;
  }
  CHECK(rows == 4);  // A100 40/80 GB, H100, H200
  // The fp8 figures quoted in the same file's text: H100 1402.6, H200 1453.4.
  CHECK(cat.gpu("H100-SXM5-80GB").mamf_flops.at(Precision::fp8) == Approx(1402.6e12));
  CHECK(cat.gpu("H200-SXM-141GB").mamf_flops.at(Precision::fp8) == Approx(1453.4e12));
  CHECK(*cat.gpu("H100-SXM5-80GB").mamf_fraction(Precision::bf16) == Approx(794.5 / 989.0));
  CHECK_FALSE(cat.gpu("T4").mamf_fraction(Precision::fp16).has_value());
}

TEST_CASE("hwprofiles: bad SM counts, workspaces and MAMF figures are errors at their pointer", "[hwprofiles][errors]") {
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "sm_count", nullptr)), "gpus.json: /gpus/T4: missing required field \"sm_count\"");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "sm_count", 0)), "gpus.json: /gpus/T4/sm_count");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "cublas_workspace", "4MHz")), "gpus.json: /gpus/T4/cublas_workspace");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "mamf", json::Json::parse(R"({"bf16": "50TFLOPS"})"))),
                         "\"bf16\" is not a precision of this GPU's peaks");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "mamf", json::Json::parse(R"({"fp16": "70TFLOPS"})"))),
                         "gpus.json: /gpus/T4/mamf/fp16: exceeds the dense peak");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "mamf", json::Json::parse(R"({"fp16": "50TFLOPS"})"))),
                         "no source for \"mamf\"");
}

namespace {

// The committed sustained-GEMM measurement (benches/baselines/gemm_sustained_torch.py): the
// median of its one-second rates of 8192^3 products back to back, and its burst from idle.
struct SustainedRun {
  double median = 0, cold = 0;
};

SustainedRun sustained_run(const std::string& file) {
  const json::Json doc = json::Json::parse(json::read_text_file(source_path("benches/results/" + file)));
  std::vector<double> rates;
  for (const json::Json& s : doc["sustained_8192"]) rates.push_back(s["tflops"].get<double>() * 1e12);
  REQUIRE(rates.size() >= 15);
  std::sort(rates.begin(), rates.end());
  SustainedRun r;
  r.median = rates.size() % 2 ? rates[rates.size() / 2] : 0.5 * (rates[rates.size() / 2 - 1] + rates[rates.size() / 2]);
  r.cold = doc["cold"][0]["tflops"].get<double>() * 1e12;
  return r;
}

}  // namespace

TEST_CASE("hwprofiles: the sustained matmul rates are the medians of the committed measurements",
          "[hwprofiles]") {
  // 8192^3 products back to back, one rate per second: 40 s of bf16 on an H100 SXM
  // (device-h100-2026-11-27), 20 s each of bf16 and FP8 on an H200 (device-h200-2026-11-28).
  const SustainedRun h100 = sustained_run("device-h100-2026-11-27/gemm-sustained.json");
  const SustainedRun h200 = sustained_run("device-h200-2026-11-28/gemm-sustained-bf16.json");
  const SustainedRun h200_fp8 = sustained_run("device-h200-2026-11-28/gemm-sustained-fp8.json");
  const hw::Catalog& cat = hw::Catalog::builtin();
  const hw::GpuSpec& g100 = cat.gpu("H100-SXM5-80GB");
  const hw::GpuSpec& g200 = cat.gpu("H200-SXM-141GB");
  CHECK(g100.sustained_matmul_flops.at(Precision::bf16) == Approx(h100.median).epsilon(1e-3));
  CHECK(g200.sustained_matmul_flops.at(Precision::bf16) == Approx(h200.median).epsilon(1e-3));
  CHECK(g200.sustained_matmul_flops.at(Precision::fp8) == Approx(h200_fp8.median).epsilon(1e-3));
  for (const hw::GpuSpec* g : {&g100, &g200}) {
    INFO(g->name);
    CHECK(g->sustained_matmul_flops.at(Precision::bf16) < g->mamf_flops.at(Precision::bf16));
    CHECK(g->sustained_matmul_flops.at(Precision::fp8) < g->mamf_flops.at(Precision::fp8));
    CHECK(cat.sources().count(g->sources.at("sustained_matmul")));
  }
  // The bursts from an idle GPU in the same files are the MAMF figures (801 and 805 vs 794.5
  // TFLOP/s bf16; 1458 vs 1453.4 fp8 on the H200).
  CHECK(h100.cold == Approx(g100.mamf_flops.at(Precision::bf16)).epsilon(0.02));
  CHECK(h200.cold == Approx(g200.mamf_flops.at(Precision::bf16)).epsilon(0.02));
  CHECK(h200_fp8.cold == Approx(g200.mamf_flops.at(Precision::fp8)).epsilon(0.02));
  CHECK(*g100.sustained_matmul_fraction(Precision::bf16) == Approx(687.7 / 989.0));
  // The A100s: the published power-limited rate on random inputs (thonking.ai: 257 TFLOP/s with
  // torch.randn, 295 with zeros, for 8192^3 at 400 W), below their MAMF.
  for (const char* name : {"A100-SXM4-40GB", "A100-SXM4-80GB"}) {
    INFO(name);
    const hw::GpuSpec& g = cat.gpu(name);
    CHECK(g.sustained_matmul_flops.at(Precision::bf16) == Approx(257e12));
    CHECK(g.sustained_matmul_flops.at(Precision::bf16) < g.mamf_flops.at(Precision::bf16));
    CHECK(g.sources.at("sustained_matmul") == "thonking_matmul_power");
  }
  CHECK_FALSE(cat.gpu("V100-SXM2-16GB").sustained_matmul_fraction(Precision::fp16).has_value());
  // The H100's FP8 is estimated: its FP8 MAMF x its bf16 sustained/MAMF ratio. The same rule on
  // the H200 lands within 0.2 % of the H200's measured FP8 rate.
  CHECK(g100.sustained_matmul_flops.at(Precision::fp8) ==
        Approx(g100.mamf_flops.at(Precision::fp8) * h100.median / g100.mamf_flops.at(Precision::bf16)).epsilon(1e-3));
  CHECK(g200.mamf_flops.at(Precision::fp8) * h200.median / g200.mamf_flops.at(Precision::bf16) ==
        Approx(h200_fp8.median).epsilon(0.002));
}

TEST_CASE("hwprofiles: bad sustained matmul figures are errors at their pointer", "[hwprofiles][errors]") {
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "sustained_matmul", json::Json::parse(R"({"bf16": "50TFLOPS"})"))),
                         "\"bf16\" is not a precision of this GPU's peaks");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "sustained_matmul", json::Json::parse(R"({"fp16": "70TFLOPS"})"))),
                         "gpus.json: /gpus/T4/sustained_matmul/fp16: exceeds the dense peak");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "sustained_matmul", json::Json::parse(R"({"fp16": "-5TFLOPS"})"))),
                         "gpus.json: /gpus/T4/sustained_matmul/fp16");
  REQUIRE_ERROR_CONTAINS(load_gpus(gpus_with("T4", "sustained_matmul", json::Json::parse(R"({"fp16": "50TFLOPS"})"))),
                         "no source for \"sustained_matmul\"");
}
