// The hardware facts that models and the executor use besides peaks and memory: SM counts,
// cuBLAS workspaces and measured matmul rates (MAMF) live in the GPU catalog with sources.
#include <cstdlib>
#include <fstream>
#include <regex>

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
