// Blackwell (p6-b200, p6e-gb200) and Trainium (trn1, trn1n, trn2) in the catalog: each figure
// against the published number its source gives, the UltraServer's 72-GPU NVLink domain in the
// cluster graph, and the Neuron runtime marking.
#include <algorithm>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/hwprofiles/cluster.hpp"

using namespace trainplan;
using trainplan::testing::source_path;
using trainplan::testing::kGiB;

namespace {

bool crosses(const hw::Cluster& c, const hw::Route& r, hw::LinkKind kind) {
  for (int id : r.links)
    if (c.links()[static_cast<size_t>(id)].kind == kind) return true;
  return false;
}

hw::Catalog gpus_with_trainium_field(const std::string& field, const json::Json& value) {
  json::Json doc = json::Json::parse(json::read_text_file(source_path("hwprofiles/catalog/gpus.json")));
  doc["gpus"]["Trainium"][field] = value;
  return hw::Catalog::from_texts({{"sources.json", json::read_text_file(source_path("hwprofiles/catalog/sources.json"))},
                                  {"gpus.json", doc.dump()}});
}

}  // namespace

TEST_CASE("hwprofiles: B200 peaks are NVIDIA's sparse tensor rates halved, compute capability 10.0", "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  // HGX B200 (p6-b200), NVIDIA's table per GPU: FP8 9 PF, BF16 4.5 PF, TF32 2.2 PF sparse; FP32
  // 75 TF; 180 GB HBM3e at 7.7 TB/s; 1000 W.
  const hw::GpuSpec& b200 = cat.gpu("B200-SXM-180GB");
  CHECK(b200.arch == "Blackwell");
  CHECK(b200.compute_capability == "10.0");
  CHECK(b200.executable());
  CHECK(b200.peak_flops_per_s(Precision::fp8) == Approx(9e15 / 2));
  CHECK(b200.peak_flops_per_s(Precision::bf16) == Approx(4.5e15 / 2));
  CHECK(b200.peak_flops_per_s(Precision::tf32) == Approx(2.2e15 / 2));
  CHECK(b200.peak_flops_per_s(Precision::fp32) == Approx(75e12));
  CHECK(b200.memory_bytes == Approx(180e9));
  CHECK(b200.memory_bandwidth_bytes_per_s == Approx(7.7e12));
  CHECK(b200.tdp_w == Approx(1000));
  // GB200's B200: FP8 10 PF, BF16 5 PF sparse; 186 GB at 8 TB/s; 1200 W. AWS's UltraServer
  // totals agree: 72 GPUs = 360 PFLOPS FP8 (dense) and 13.4 TB of HBM3e.
  const hw::GpuSpec& gb = cat.gpu("B200-GB200-186GB");
  CHECK(gb.compute_capability == "10.0");
  CHECK(gb.peak_flops_per_s(Precision::bf16) == Approx(5e15 / 2));
  CHECK(72 * gb.peak_flops_per_s(Precision::fp8) == Approx(360e15));
  CHECK(72 * gb.memory_bytes == Approx(13.4e12).epsilon(0.001));
  CHECK(gb.memory_bandwidth_bytes_per_s == Approx(8e12));
  CHECK(gb.tdp_w == Approx(1200));
  for (const auto* g : {&b200, &gb})
    for (const auto& [group, id] : g->sources) {
      INFO(g->name << " " << group);
      for (const auto& one : {id.substr(0, id.find('+')), id.substr(id.find('+') == std::string::npos ? 0 : id.find('+') + 1)})
        CHECK(cat.sources().count(one));
    }
}

TEST_CASE("hwprofiles: p6-b200 and p6e-gb200 instances match AWS's figures and carry no invented price", "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  const hw::InstanceType& p6 = cat.instance("p6-b200.48xlarge");
  CHECK(p6.gpu == "B200-SXM-180GB");
  CHECK(p6.gpu_count == 8);
  CHECK(p6.vcpus == 192);
  CHECK(p6.host_memory_bytes == Approx(2048 * kGiB));
  // NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s per direction.
  CHECK(p6.topology.nvswitch_bandwidth_bytes_per_s == Approx(1.8e12 / 2));
  CHECK(p6.network.bandwidth_bytes_per_s == Approx(3200e9 / 8));
  CHECK(p6.topology.nvlink_domain_instances == 1);
  CHECK_FALSE(p6.prices.ec2_on_demand);  // none found in a source: never made up
  CHECK_FALSE(p6.prices.spot);
  // p6e-gb200.36xlarge: 4 GPUs; u-p6e-gb200x72 = 18 instances = 72 GPUs; 28.8 Tbps EFAv4 and
  // 405 TB NVMe per UltraServer.
  const hw::InstanceType& p6e = cat.instance("p6e-gb200.36xlarge");
  CHECK(p6e.gpu_count == 4);
  CHECK(p6e.topology.nvlink_domain_instances == 18);
  CHECK(p6e.gpu_count * p6e.topology.nvlink_domain_instances == 72);
  CHECK(18 * p6e.network.bandwidth_bytes_per_s == Approx(28.8e12 / 8));
  CHECK(18 * p6e.storage.local_nvme_bytes == Approx(405e12));
  CHECK(p6e.topology.nvswitch_bandwidth_bytes_per_s == Approx(900e9));
  CHECK_FALSE(p6e.prices.ec2_on_demand);
}

TEST_CASE("hwprofiles: trn1, trn1n and trn2 totals are the Neuron docs' instance figures", "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  // Neuron docs, Trn1/Trn1n architecture table: 16 Trainium, 128 vCPU, 512 GiB host, 3,040
  // FP16/BF16/TF32 and 760 FP32 TFLOPS, 512 GiB device memory at 13,120 GiB/s, EFA 800 / 1600 Gbps.
  for (const char* name : {"trn1.32xlarge", "trn1n.32xlarge"}) {
    INFO(name);
    const hw::InstanceType& t = cat.instance(name);
    const hw::GpuSpec& chip = cat.gpu(t.gpu);
    CHECK(t.gpu_count == 16);
    CHECK(t.vcpus == 128);
    CHECK(t.host_memory_bytes == Approx(512 * kGiB));
    CHECK(t.gpu_count * chip.peak_flops_per_s(Precision::bf16) == Approx(3040e12));
    CHECK(t.gpu_count * chip.peak_flops_per_s(Precision::fp32) == Approx(760e12));
    CHECK(t.gpu_count * chip.memory_bytes == Approx(512 * kGiB));
    CHECK(t.gpu_count * chip.memory_bandwidth_bytes_per_s == Approx(13120 * kGiB));
  }
  CHECK(cat.instance("trn1.32xlarge").network.bandwidth_bytes_per_s == Approx(800e9 / 8));
  CHECK(cat.instance("trn1n.32xlarge").network.bandwidth_bytes_per_s == Approx(1600e9 / 8));
  CHECK(cat.instance("trn1.32xlarge").network.nics == 8);
  CHECK(cat.instance("trn1n.32xlarge").network.nics == 16);
  // Trainium2: 8 NeuronCore-v3, 1,299 FP8 / 667 BF16 / 181 FP32 dense TFLOPS, 96 GiB at 2.9 TB/s.
  const hw::InstanceType& trn2 = cat.instance("trn2.48xlarge");
  const hw::GpuSpec& t2 = cat.gpu(trn2.gpu);
  CHECK(t2.peak_flops_per_s(Precision::fp8) == Approx(1299e12));
  CHECK(t2.peak_flops_per_s(Precision::bf16) == Approx(667e12));
  CHECK(t2.peak_flops_per_s(Precision::fp32) == Approx(181e12));
  CHECK(t2.memory_bytes == Approx(96 * kGiB));
  CHECK(t2.memory_bandwidth_bytes_per_s == Approx(2.9e12));
  CHECK(t2.sm_count == 8);
  CHECK(trn2.gpu_count == 16);
  // Only trn1.32xlarge has a price found in a source.
  CHECK(cat.instance("trn1.32xlarge").prices.ec2_on_demand == Approx(21.50));
  CHECK_FALSE(cat.instance("trn1n.32xlarge").prices.ec2_on_demand);
  CHECK_FALSE(trn2.prices.ec2_on_demand);
}

TEST_CASE("hwprofiles: Trainium runs on Neuron: no CUDA compute capability or cuBLAS workspace, not executable",
          "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  for (const char* name : {"Trainium", "Trainium2"}) {
    INFO(name);
    const hw::GpuSpec& g = cat.gpu(name);
    CHECK(g.runtime == "neuron");
    CHECK_FALSE(g.executable());
    CHECK(g.compute_capability.empty());
    CHECK(g.cublas_workspace_bytes == 0);
    CHECK(g.supports(Precision::bf16));
  }
  CHECK(to_json(cat.gpu("Trainium2"))["runtime"] == "neuron");
  CHECK_FALSE(to_json(cat.gpu("H100-SXM5-80GB")).contains("runtime"));
  REQUIRE_ERROR_CONTAINS(gpus_with_trainium_field("cublas_workspace", "4MiB"),
                         "/gpus/Trainium/cublas_workspace: a Neuron accelerator has no cuBLAS workspace");
  REQUIRE_ERROR_CONTAINS(gpus_with_trainium_field("runtime", "rocm"), "/gpus/Trainium/runtime");
}

TEST_CASE("hwprofiles: GPUs of one UltraServer route over NVLink across instances, of two over EFA", "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  const hw::InstanceType& p6e = cat.instance("p6e-gb200.36xlarge");
  // 20 instances: 0-17 are u-p6e-gb200x72 #0 (GPUs 0-71), 18-19 the start of #1 (GPUs 72-79).
  hw::Cluster c = hw::Cluster::build(p6e, 20, cat);
  const double nvlink = p6e.topology.nvswitch_bandwidth_bytes_per_s;
  // Across UltraServers: one GPU's 400 Gbps NIC behind its PCIe Gen5 link (the P5 estimate,
  // 48 GB/s, is the narrower of the two).
  const double nic = std::min(p6e.network.nic_bandwidth_bytes_per_s(), p6e.topology.pcie_bandwidth_bytes_per_s);
  for (auto [a, b] : {std::pair{0, 4}, {0, 71}, {68, 3}, {72, 79}, {79, 72}}) {
    INFO(a << " -> " << b);
    const hw::Route& r = c.route(a, b);
    CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(nvlink));
    CHECK(r.latency_s == Approx(2 * p6e.topology.nvlink_latency_s));  // the same as inside an instance
    CHECK_FALSE(crosses(c, r, hw::LinkKind::network));
  }
  for (auto [a, b] : {std::pair{0, 72}, {71, 72}, {75, 4}}) {
    INFO(a << " -> " << b);
    const hw::Route& r = c.route(a, b);
    CHECK(crosses(c, r, hw::LinkKind::network));
    CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(nic));
  }
  // Inside an instance nothing changes: GPU -> NVSwitch -> GPU.
  CHECK(c.route(0, 1).hops == 2);
  int domains = 0;
  for (const auto& v : c.vertices()) domains += v.kind == hw::VertexKind::nvlink_domain ? 1 : 0;
  CHECK(domains == 2);
  // Two p6-b200 nodes have no shared domain: EFA between them.
  hw::Cluster p6 = hw::Cluster::build(cat.instance("p6-b200.48xlarge"), 2, cat);
  CHECK(crosses(p6, p6.route(0, 8), hw::LinkKind::network));
  CHECK(p6.route(0, 7).bottleneck_bandwidth_bytes_per_s == Approx(900e9));
}
