// The built-in hardware catalog against its independent oracle, ../shared/hwdata/instances.json
// (the research data the catalog was transcribed from), and against published peaks.
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <set>

#include "test_support.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;
using trainplan::testing::shared_path;
using trainplan::testing::kGiB;
using trainplan::testing::source_path;

namespace {

const nlohmann::json& shared_hwdata() {
  static const nlohmann::json kData = [] {
    std::ifstream in(shared_path("hwdata/instances.json"));
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
  }();
  return kData;
}


}  // namespace

TEST_CASE("hwprofiles: every size of the four brief families is present with its GPUs", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  struct Expect {
    const char* name;
    const char* gpu;
    int count;
  };
  const Expect expected[] = {
      {"g4dn.xlarge", "T4", 1},      {"g4dn.2xlarge", "T4", 1},   {"g4dn.4xlarge", "T4", 1},
      {"g4dn.8xlarge", "T4", 1},     {"g4dn.12xlarge", "T4", 4},  {"g4dn.16xlarge", "T4", 1},
      {"g4dn.metal", "T4", 8},       {"p3.2xlarge", "V100-SXM2-16GB", 1}, {"p3.8xlarge", "V100-SXM2-16GB", 4},
      {"p3.16xlarge", "V100-SXM2-16GB", 8}, {"p3dn.24xlarge", "V100-SXM2-32GB", 8},
      {"p4d.24xlarge", "A100-SXM4-40GB", 8},
  };
  for (const auto& e : expected) {
    INFO(e.name);
    const auto& inst = cat.instance(e.name);
    CHECK(inst.gpu == e.gpu);
    CHECK(inst.gpu_count == e.count);
    CHECK(inst.aws);
  }
  for (const char* newer : {"p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "g5.48xlarge",
                            "g6.12xlarge", "g6e.48xlarge", "dgx-a100-80gb", "dgx-h100"})
    CHECK(cat.has_instance(newer));
}

TEST_CASE("hwprofiles: instances match ../shared/hwdata (GPUs, vCPU, RAM, EFA, prices)", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  const auto& data = shared_hwdata();
  int checked = 0;
  for (const auto& row : data.at("instances")) {
    const std::string name = row.at("instance");
    INFO(name);
    REQUIRE(cat.has_instance(name));
    const auto& inst = cat.instance(name);
    CHECK(inst.gpu == row.at("gpu").get<std::string>());
    CHECK(inst.gpu_count == row.at("gpu_count").get<int>());
    CHECK(inst.vcpus == row.at("vcpus").get<int>());
    CHECK(inst.host_memory_bytes == Approx(row.at("host_ram_gib").get<double>() * kGiB));
    // EFA: a boolean or a description such as "EFA v1, 4x100 Gbps".
    const auto& efa = row.at("efa");
    CHECK(inst.network.efa == (efa.is_boolean() ? efa.get<bool>() : true));
    // Plain Gbps figures are copied; "up to N" sizes carry a lower baseline and are marked.
    const auto& gbps = row.at("network_gbps");
    if (gbps.is_string()) {
      const std::string s = gbps.get<std::string>();
      if (s.rfind("up to", 0) == 0) {
        CHECK(inst.network.burstable);
        CHECK(inst.network.bandwidth_bytes_per_s < std::stod(s.substr(6)) * 1e9 / 8);
      } else {
        CHECK(inst.network.bandwidth_bytes_per_s == Approx(std::stod(s) * 1e9 / 8));
      }
    }
    const auto& price = row.at("price_usd_per_hr_us_east_1");
    const auto& current = price.at("ec2_on_demand_current");
    const auto& previous = price.at("ec2_on_demand_previous");
    if (!current.is_null()) {
      REQUIRE(inst.prices.ec2_on_demand);
      CHECK(*inst.prices.ec2_on_demand == Approx(current.get<double>()));
      CHECK(inst.sources.at("ec2_on_demand").find("price_list_2026") != std::string::npos);
    } else if (!previous.is_null()) {  // p3dn: only the older snapshot lists it
      REQUIRE(inst.prices.ec2_on_demand);
      CHECK(*inst.prices.ec2_on_demand == Approx(previous.get<double>()));
      CHECK(inst.sources.at("ec2_on_demand") == "skypilot_v7");
    } else {
      CHECK_FALSE(inst.prices.ec2_on_demand);  // p5e: Capacity Blocks only
    }
    const auto& sm = price.at("sagemaker_training_on_demand");
    if (!sm.is_null()) {
      REQUIRE(inst.prices.sagemaker_on_demand);
      CHECK(*inst.prices.sagemaker_on_demand == Approx(sm.get<double>()));
      CHECK_FALSE(inst.prices.sagemaker_estimated);
    } else if (inst.prices.sagemaker_on_demand) {
      CHECK(inst.prices.sagemaker_estimated);
    }
    const auto& spot = price.at("ec2_spot_samples");
    if (!spot.is_null()) {
      // The us-east-1 samples, else the first region's (p5e).
      std::vector<double> samples;
      for (auto it = spot.begin(); it != spot.end(); ++it)
        if (it.key() != "source" && samples.empty()) samples = it.value().get<std::vector<double>>();
      if (spot.contains("us-east-1")) samples = spot.at("us-east-1").get<std::vector<double>>();
      REQUIRE(inst.prices.spot_min);
      CHECK(*inst.prices.spot_min == Approx(samples.front()));
      CHECK(*inst.prices.spot_max == Approx(samples.back()));
      CHECK(*inst.prices.spot == Approx(0.5 * (samples.front() + samples.back())));
      CHECK_FALSE(inst.prices.spot_estimated);
    } else if (inst.prices.spot) {
      CHECK(inst.prices.spot_estimated);
    }
    // Spot Advisor buckets per GPU instance were not found: none is invented.
    CHECK(inst.prices.interruption_bucket.empty());
    ++checked;
  }
  CHECK(checked == 40);
}

TEST_CASE("hwprofiles: GPU peaks and memory match ../shared/hwdata", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  const auto& gpus = shared_hwdata().at("gpus");
  for (auto it = gpus.begin(); it != gpus.end(); ++it) {
    INFO(it.key());
    // Resolve "same_as": the base entry, overridden by the variant's fields.
    nlohmann::json row = it.value();
    if (row.contains("same_as")) {
      nlohmann::json base = gpus.at(row.at("same_as").get<std::string>());
      base.update(row);
      row = base;
    }
    const auto& g = cat.gpu(it.key());
    CHECK(g.memory_bytes == Approx(row.at("mem_gb").get<double>() * kGiB));
    CHECK(g.memory_bandwidth_bytes_per_s == Approx(row.at("mem_bw_GBps").get<double>() * 1e9));
    const std::pair<const char*, Precision> columns[] = {{"fp32_tflops", Precision::fp32},
                                                         {"tf32_tflops", Precision::tf32},
                                                         {"fp16_tensor_tflops_dense", Precision::fp16},
                                                         {"bf16_tensor_tflops_dense", Precision::bf16},
                                                         {"fp8_tflops_dense", Precision::fp8}};
    for (const auto& [column, precision] : columns) {
      INFO(column);
      const auto& v = row.at(column);
      CHECK(g.supports(precision) == !v.is_null());
      if (!v.is_null()) CHECK(g.peak_flops_per_s(precision) == Approx(v.get<double>() * 1e12));
    }
    CHECK(g.tdp_w == Approx(row.at("tdp_w").get<double>()));
  }
}

TEST_CASE("hwprofiles: published dense peaks (A100 312, H100 989, V100 125, T4 65 TFLOP/s)", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  CHECK(cat.gpu("A100-SXM4-40GB").peak_flops_per_s(Precision::bf16) == Approx(312e12));
  CHECK(cat.gpu("A100-SXM4-80GB").peak_flops_per_s(Precision::bf16) == Approx(312e12));
  CHECK(cat.gpu("H100-SXM5-80GB").peak_flops_per_s(Precision::bf16) == Approx(989e12));
  CHECK(cat.gpu("V100-SXM2-16GB").peak_flops_per_s(Precision::fp16) == Approx(125e12));
  CHECK(cat.gpu("T4").peak_flops_per_s(Precision::fp16) == Approx(65e12));
}

TEST_CASE("hwprofiles: T4 and V100 train in fp16 (no bf16), Ampere and later in bf16", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  for (const char* name : {"T4", "V100-SXM2-16GB", "V100-SXM2-32GB"}) {
    INFO(name);
    const auto& g = cat.gpu(name);
    CHECK(g.supports(Precision::fp16));
    CHECK_FALSE(g.supports(Precision::bf16));
    CHECK(g.preferred_half_precision() == Precision::fp16);
    REQUIRE_ERROR_CONTAINS(g.peak_flops_per_s(Precision::bf16), "does not support bf16");
  }
  for (const char* name : {"A10G", "L4", "L40S", "A100-SXM4-40GB", "H100-SXM5-80GB", "H200-SXM-141GB"})
    CHECK(cat.gpu(name).preferred_half_precision() == Precision::bf16);
}

TEST_CASE("hwprofiles: every source id resolves and has a date, memory-only facts are unverified",
          "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  std::set<std::string> used;
  auto check_ref = [&](const std::string& ref) {
    for (const auto& id : split(ref, '+')) {
      INFO(id);
      used.insert(id);
      const hw::Source& s = cat.source(id);
      CHECK_FALSE(s.date.empty());
      CHECK_FALSE(s.description.empty());
    }
  };
  for (const auto& name : cat.instance_names()) {
    INFO(name);
    const auto& inst = cat.instance(name);
    for (const char* group : {"hardware", "topology", "pcie", "network", "efa", "network_latency", "storage"})
      CHECK(inst.sources.count(group) == 1);
    if (inst.prices.ec2_on_demand) CHECK(inst.sources.count("ec2_on_demand") == 1);
    if (inst.prices.sagemaker_on_demand) CHECK(inst.sources.count("sagemaker") == 1);
    if (inst.prices.spot) CHECK(inst.sources.count("spot") == 1);
    for (const auto& [group, ref] : inst.sources) check_ref(ref);
  }
  for (const auto& name : cat.gpu_names())
    for (const auto& [group, ref] : cat.gpu(name).sources) check_ref(ref);
  for (const auto& name : cat.cpu_instance_names())
    for (const auto& [group, ref] : cat.cpu_instance(name).sources) check_ref(ref);
  check_ref(cat.capacity_block_rules().source);
  for (const auto& offer : cat.capacity_block_offers()) check_ref(offer.source);
  for (const auto& [fact, ref] : cat.placement().sources) check_ref(ref);
  for (const auto& price : cat.placement().inter_region) check_ref(price.source);
  check_ref(cat.region_table().source);
  for (const auto& [name, stack] : cat.software_stacks())
    for (const auto& [field, ref] : stack.sources) check_ref(ref);
  // No dead entries in the sources table.
  for (const auto& [id, source] : cat.sources()) {
    INFO("unused source " << id);
    CHECK(used.count(id) == 1);
  }
  // Hosts with two sockets cite the inter-socket estimate.
  for (const auto& name : cat.instance_names()) {
    INFO(name);
    const auto& inst = cat.instance(name);
    CHECK((inst.sources.at("pcie").find("estimate_inter_socket") != std::string::npos) == (inst.topology.sockets > 1));
  }
  // The shared data's "memory (unverified)" and our own estimates stay unverified.
  for (const char* id : {"memory", "catalog_memory", "dgx1v_topology", "estimate_pcie", "estimate_latency",
                         "sagemaker_third_party", "sagemaker_uplift", "spot_discount", "a10g_compute_unverified"})
    CHECK_FALSE(cat.source(id).verified);
  CHECK(cat.source("p4d_blog").verified);
  CHECK(cat.source("p4d_blog").date == "2020-11-03");
  // Estimated prices name the source of their factor, not a price list.
  const auto& p3dn = cat.instance("p3dn.24xlarge");
  CHECK(p3dn.sources.at("sagemaker") == "sagemaker_uplift");
  CHECK(cat.instance("g5.8xlarge").sources.at("spot") == "spot_discount");
}

TEST_CASE("hwprofiles: estimated prices follow EC2 x uplift and EC2 x (1 - discount)", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  const auto& p3dn = cat.instance("p3dn.24xlarge").prices;
  CHECK(p3dn.sagemaker_estimated);
  CHECK(*p3dn.sagemaker_on_demand == Approx(31.212 * 1.15));
  CHECK(*p3dn.spot == Approx(0.5 * (3.2632 + 3.8094)));
  const auto& g5 = cat.instance("g5.8xlarge").prices;
  CHECK(g5.spot_estimated);
  CHECK(*g5.spot == Approx(2.448 * (1.0 - 0.58)));
  CHECK(*g5.sagemaker_on_demand == Approx(2.448 * 1.4));
  // Measured ratios the uplift factors come from (../shared/hwdata pricing notes).
  CHECK(3.825 / 3.06 == Approx(1.25));
  CHECK(*cat.instance("g4dn.xlarge").prices.sagemaker_on_demand / *cat.instance("g4dn.xlarge").prices.ec2_on_demand ==
        Approx(1.399).epsilon(0.001));
  // p5e: no on-demand listing, so neither EC2 nor an estimated SageMaker price, and it says why.
  const auto& p5e = cat.instance("p5e.48xlarge");
  CHECK_FALSE(p5e.prices.ec2_on_demand);
  CHECK_FALSE(p5e.prices.sagemaker_on_demand);
  bool explained = false;
  for (const auto& n : p5e.notes) explained = explained || n.find("Capacity Blocks") != std::string::npos;
  CHECK(explained);
}

TEST_CASE("hwprofiles: topology facts of the catalog (lanes, NVSwitch, sockets, EFA)", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  const auto& p3 = cat.instance("p3.16xlarge").topology;
  CHECK(p3.kind == hw::IntraNodeKind::nvlink_mesh);
  CHECK(p3.nvlink_lane_bandwidth_bytes_per_s == Approx(25e9));
  CHECK(p3.sockets == 2);
  // p3.8xlarge is GPUs 0-3 of the p3.16xlarge mesh.
  const auto& p38 = cat.instance("p3.8xlarge").topology;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) CHECK(p38.nvlink_lanes[i][j] == p3.nvlink_lanes[i][j]);
  CHECK(cat.instance("p3dn.24xlarge").topology.nvlink_lanes == p3.nvlink_lanes);
  CHECK(cat.instance("p4d.24xlarge").topology.nvswitch_bandwidth_bytes_per_s == Approx(12 * 25e9));
  CHECK(cat.instance("p5.48xlarge").topology.nvswitch_bandwidth_bytes_per_s == Approx(18 * 25e9));
  for (const char* name : {"g4dn.12xlarge", "g5.12xlarge", "g6.48xlarge", "g6e.24xlarge", "g4dn.metal"})
    CHECK(cat.instance(name).topology.kind == hw::IntraNodeKind::pcie);
  const auto& p4d = cat.instance("p4d.24xlarge").network;
  CHECK(p4d.nics == 4);
  CHECK(p4d.nic_bandwidth_bytes_per_s() == Approx(100e9 / 8));
  CHECK(p4d.gpudirect_rdma);
  CHECK(cat.instance("p5.48xlarge").network.nics == 32);
  CHECK(cat.instance("p5en.48xlarge").network.nic_bandwidth_bytes_per_s() == Approx(200e9 / 8));
  const auto& p3dn = cat.instance("p3dn.24xlarge").network;
  CHECK(p3dn.nics == 1);
  CHECK(p3dn.efa);
  CHECK_FALSE(p3dn.gpudirect_rdma);
}

TEST_CASE("hwprofiles: generic DGX clusters match the validation systems", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  const auto& a100 = cat.instance("dgx-a100-80gb");
  CHECK_FALSE(a100.aws);
  CHECK(a100.gpu == "A100-SXM4-80GB");
  CHECK(a100.network.nics == 8);
  CHECK(a100.network.nic_bandwidth_bytes_per_s() == Approx(200e9 / 8));  // HDR 200 Gb/s per GPU
  CHECK_FALSE(a100.prices.ec2_on_demand);
  CHECK_FALSE(a100.prices.spot);
  const auto& h100 = cat.instance("dgx-h100");
  CHECK(h100.network.nic_bandwidth_bytes_per_s() == Approx(400e9 / 8));  // NDR 400 Gb/s per GPU
  CHECK(h100.host_memory_bytes == Approx(2e12));
  CHECK(h100.network.gpudirect_rdma);
  // DGX-2 (GTC 2018 announcement): 16 V100 32 GB on NVSwitch (300 GB/s per GPU both ways), 8 x
  // 100 Gb/s EDR InfiniBand, 1.5 TB host memory, 2 PFLOPS of tensor math.
  const auto& dgx2 = cat.instance("dgx-2");
  CHECK_FALSE(dgx2.aws);
  CHECK(dgx2.gpu_count == 16);
  CHECK(dgx2.gpu == "V100-SXM3-32GB");
  CHECK(dgx2.topology.nvswitch_bandwidth_bytes_per_s * 2 == Approx(300e9));
  CHECK(dgx2.network.nics == 8);
  CHECK(dgx2.network.nic_bandwidth_bytes_per_s() == Approx(100e9 / 8));
  CHECK(dgx2.host_memory_bytes == Approx(1.536e12));
  CHECK(16 * cat.gpu(dgx2.gpu).peak_flops_per_s(Precision::fp16) == Approx(2e15));
  // A node with another stated network: half the NICs at the same rate.
  hw::Catalog mine = cat;
  const auto& four = mine.instance(mine.add_network_variant("dgx-a100-80gb", 4, 200e9 / 8, "stated"));
  CHECK(four.name == "dgx-a100-80gb:4x200Gbps");
  CHECK(four.network.nics == 4);
  CHECK(four.network.nic_bandwidth_bytes_per_s() == Approx(200e9 / 8));
  CHECK(four.gpu_count == 8);
  REQUIRE_ERROR_CONTAINS(mine.add_network_variant("dgx-a100-80gb", 0, 1e9, "none"), "1 to 64 NICs");
}

TEST_CASE("hwprofiles: load_dir of the catalog folder equals the built-in catalog", "[hwprofiles][catalog]") {
  const auto& builtin = hw::Catalog::builtin();
  hw::Catalog from_dir = hw::Catalog::load_dir(source_path("hwprofiles/catalog"));
  REQUIRE(from_dir.instance_names() == builtin.instance_names());
  for (const auto& name : builtin.instance_names()) {
    auto a = hw::to_json(builtin.instance(name));
    auto b = hw::to_json(from_dir.instance(name));
    a.erase("file");
    b.erase("file");
    CHECK(json::dump(a) == json::dump(b));
  }
  CHECK(hw::load_catalog("", "").instance_names() == builtin.instance_names());
  REQUIRE_ERROR_CONTAINS(hw::Catalog::load_dir(source_path("hwprofiles/no-such-dir")), "is not a directory");
}

TEST_CASE("hwprofiles: unknown names suggest the closest one", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  REQUIRE_ERROR_CONTAINS(cat.instance("p4d.24xlage"), "did you mean \"p4d.24xlarge\"");
  REQUIRE_ERROR_CONTAINS(cat.gpu("A100-SXM4-40G"), "did you mean \"A100-SXM4-40GB\"");
  REQUIRE_ERROR_CONTAINS(cat.source("price_list_2025"), "did you mean \"price_list_2026\"");
  CHECK(cat.find_instance("nope") == nullptr);
}

TEST_CASE("hwprofiles: instance JSON uses SI units and is deterministic", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  auto j = hw::to_json(cat.instance("p4d.24xlarge"));
  CHECK(j["network"]["bandwidth_bytes_per_s"].get<double>() == Approx(50e9));
  CHECK(j["topology"]["nvswitch_bandwidth_bytes_per_s"].get<double>() == Approx(300e9));
  CHECK(j["prices"]["interruption_bucket"].is_null());
  CHECK(json::dump(j) == json::dump(hw::to_json(cat.instance("p4d.24xlarge"))));
  CHECK(hw::to_json(cat.gpu("T4"))["peak_flops_per_s"].contains("bf16") == false);
}

TEST_CASE("hwprofiles: P100 PCIe at NVIDIA's launch figures, the Horovod benchmark servers around it", "[hwprofiles][catalog]") {
  const auto& cat = hw::Catalog::builtin();
  // NVIDIA's figures at the PCIe P100's launch (ISC 2016): 9.3 TFLOPS single, 18.7 half,
  // 16 GB HBM2 at 720 GB/s, 250 W; GP100 with 56 SMs enabled; compute capability 6.0.
  const auto& p100 = cat.gpu("P100-PCIE-16GB");
  CHECK(p100.peak_flops_per_s(Precision::fp32) == Approx(9.3e12));
  CHECK(p100.peak_flops_per_s(Precision::fp16) == Approx(18.7e12));
  CHECK_FALSE(p100.supports(Precision::bf16));
  CHECK(p100.memory_bytes == Approx(16 * kGiB));
  CHECK(p100.memory_bandwidth_bytes_per_s == Approx(720e9));
  CHECK(p100.tdp_w == Approx(250));
  CHECK(p100.sm_count == 56);
  CHECK(p100.compute_capability == "6.0");
  CHECK(cat.source(p100.sources.at("peaks")).verified);
  // Horovod docs: "servers with 4 Pascal GPUs each connected by a RoCE-capable 25 Gbit/s network".
  const auto& node = cat.instance("p100-pcie-4gpu-roce25");
  CHECK_FALSE(node.aws);
  CHECK(node.gpu == "P100-PCIE-16GB");
  CHECK(node.gpu_count == 4);
  CHECK(node.topology.kind == hw::IntraNodeKind::pcie);
  CHECK(node.network.bandwidth_bytes_per_s == Approx(25e9 / 8));
  CHECK_FALSE(node.network.gpudirect_rdma);
  CHECK_FALSE(node.prices.ec2_on_demand);
}

TEST_CASE("hwprofiles: derate_network scales an instance's network, and refuses what is not a fraction",
          "[hwprofiles][catalog]") {
  hw::Catalog cat = hw::Catalog::builtin();
  const double line = cat.instance("p3dn.24xlarge").network.bandwidth_bytes_per_s;
  CHECK(line == Approx(100e9 / 8));
  cat.derate_network("p3dn.24xlarge", 0.8, "NCCL over aws-ofi-nccl");
  CHECK(cat.instance("p3dn.24xlarge").network.bandwidth_bytes_per_s == Approx(0.8 * line));
  CHECK(cat.instance("p3dn.24xlarge").notes.back() == "NCCL over aws-ofi-nccl");
  CHECK(hw::Catalog::builtin().instance("p3dn.24xlarge").network.bandwidth_bytes_per_s == Approx(line));  // a copy
  REQUIRE_ERROR_CONTAINS(cat.derate_network("p3dn.24xlarge", 0.0, "x"), "must be in (0, 1]");
  REQUIRE_ERROR_CONTAINS(cat.derate_network("p3dn.24xlarge", 1.5, "x"), "must be in (0, 1]");
  REQUIRE_ERROR_CONTAINS(cat.derate_network("p3dn.24xlarg", 0.5, "x"), "p3dn.24xlarge");
}

TEST_CASE("catalog: the software stacks, their fusions and sources, and bad stack entries as errors", "[hwprofiles]") {
  const auto& cat = hw::Catalog::builtin();
  for (const char* name : {"pytorch-eager", "pytorch-fsdp", "deepspeed", "deepspeed-2021", "megatron-lm", "megatron-core", "jax-xla"}) {
    INFO(name);
    const hw::SoftwareStack& s = cat.software(name);
    CHECK(s.launch_s > 0);
    for (const char* field : {"launch", "kernel_gap", "layer_hook", "micro_batch", "step", "sync_before_optimizer"})
      CHECK(s.sources.count(field) == 1);
  }
  CHECK(cat.software_stacks().count(hw::kDefaultSoftware) == 1);
  // Eager runs one kernel per op; Megatron fuses dropout into the residual add; TE the layer
  // norm into the linear; XLA the elementwise ops into their neighbours, with a cheaper launch.
  CHECK(cat.software("pytorch-eager").kernel_scale("dropout") == 1);
  CHECK(cat.software("megatron-lm").kernel_scale("dropout") == 0);
  CHECK(cat.software("megatron-core").kernel_scale("layernorm") == 0);
  CHECK(cat.software("jax-xla").kernel_scale("activation") == 0);
  CHECK(cat.software("jax-xla").launch_s < cat.software("pytorch-eager").launch_s);
  CHECK(cat.software("pytorch-fsdp").layer_hook_s > cat.software("pytorch-eager").layer_hook_s);
  CHECK_FALSE(cat.software("jax-xla").sync_before_optimizer);
  REQUIRE_ERROR_CONTAINS(cat.software("tensorflow"), "pytorch-eager");

  const std::string sources = R"({"sources": {"s": {"description": "d", "date": "2026", "verified": false}}})";
  auto stack = [](const std::string& fields) {
    return R"({"software": {"x": {"description": "d", "launch": "10us", "kernel_gap": "2us", "layer_hook": "0us",
               "micro_batch": "0us", "step": "0us", "sync_before_optimizer": false,
               "sources": {"launch": "s", "kernel_gap": "s", "layer_hook": "s", "micro_batch": "s", "step": "s",
                           "sync_before_optimizer": "s"})" + fields + "}}}";
  };
  auto load = [&](const std::string& text) { return hw::Catalog::from_texts({{"sources.json", sources}, {"software.json", text}}); };
  CHECK(load(stack("")).software("x").launch_s == Approx(10e-6));
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "kernels": {"softmax": 0})")), "unknown op class");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "kernels": {"dropout": -1})")), "/software/x/kernels/dropout");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "kernels": {"dropout": 0})")), "/software/x/sources");  // kernels without a source
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "extra": 1)")), "extra");
}

TEST_CASE("catalog: PyTorch FSDP's pass over the unsharded gradient before each reduction (grad_epilogue), sourced", "[hwprofiles]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::SoftwareStack& fsdp = cat.software("pytorch-fsdp");
  CHECK(fsdp.grad_epilogue);
  CHECK(fsdp.sources.at("grad_epilogue") == "pytorch_fsdp_post_backward");
  CHECK(cat.sources().count("pytorch_fsdp_post_backward") == 1);
  CHECK_THAT(hw::describe(fsdp), Catch::Contains("pre-divides each unsharded gradient"));
  for (const auto& [name, st] : cat.software_stacks())
    if (name != "pytorch-fsdp") CHECK_FALSE(st.grad_epilogue);
  // Bytes per parameter: cast (read the training precision, write the reduce precision) where the
  // reduce precision is wider, then the in-place pre-division in the reduce precision.
  CHECK(fsdp.grad_epilogue_bytes(Precision::bf16, Precision::fp32) == 2 + 4 + 8);
  CHECK(fsdp.grad_epilogue_bytes(Precision::bf16, Precision::bf16) == 4);
  CHECK(fsdp.grad_epilogue_bytes(Precision::fp32, Precision::fp32) == 8);
  CHECK(cat.software("megatron-core").grad_epilogue_bytes(Precision::bf16, Precision::fp32) == 0);
}

TEST_CASE("catalog: a stack's synchronous per-tensor ZeRO-3 gathers (DeepSpeed v0.3), sourced, and bad entries as errors", "[hwprofiles]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::SoftwareStack& old = cat.software("deepspeed-2021");
  CHECK(old.zero3_tensor_sync);
  // DeepSpeed#1069's 130 us pre-launch + 250 us launch per gather, measured on 8 ranks
  // (DeepSpeed#1174's p4d.24xlarge), is the fixed issue plus those 8 ranks' views and copies.
  CHECK(old.zero3_tensor_issue_s + 8 * (old.zero3_rank_view_s + old.zero3_rank_copy_s) == Approx(130e-6 + 250e-6));
  // Per rank: a copy issued from C++ is one launch-bound launch (3.8 us, the CUDA-graphs blog);
  // the Python view is the stack's eager op without that launch.
  CHECK(old.zero3_rank_copy_s == Approx(3.8e-6));
  CHECK(old.zero3_rank_view_s + old.zero3_rank_copy_s == Approx(old.launch_s));
  CHECK(old.sources.at("zero3_tensor_sync") == "deepspeed_pr_1188+deepspeed_v03_partition_parameters");
  CHECK(old.sources.at("zero3_tensor_issue") == "deepspeed_issue_1069+deepspeed_issue_1174");
  CHECK(old.sources.at("zero3_rank_copy") == "cuda_graphs_blog+pytorch_1_8_process_group_nccl");
  for (const char* id : {"deepspeed_pr_1188", "deepspeed_issue_1069", "deepspeed_issue_1174", "deepspeed_v03_partition_parameters",
                         "pytorch_1_8_process_group_nccl"})
    CHECK(cat.sources().count(id) == 1);
  CHECK_THAT(hw::describe(old), Catch::Contains("ZeRO-3 gathers one tensor at a time"));
  CHECK_THAT(hw::describe(old), Catch::Contains("per rank of the group"));
  // Apart from ZeRO-3 it is the current DeepSpeed engine; no other stack synchronizes.
  const hw::SoftwareStack& now = cat.software("deepspeed");
  CHECK(old.launch_s == now.launch_s);
  CHECK(old.micro_batch_s == now.micro_batch_s);
  CHECK(old.step_s == now.step_s);
  for (const auto& [name, st] : cat.software_stacks())
    if (name != "deepspeed-2021") CHECK_FALSE(st.zero3_tensor_sync);
  // DeepSpeed's module hooks release parameters after every forward, a recomputed one too;
  // FSDP recomputes inside the unit it gathered for the backward.
  for (const char* name : {"deepspeed", "deepspeed-2021"}) {
    CHECK(cat.software(name).zero3_recompute_gathers);
    CHECK(cat.software(name).sources.at("zero3_recompute_gathers") == "deepspeed_zero3_hooks");
  }
  CHECK_FALSE(cat.software("pytorch-fsdp").zero3_recompute_gathers);
  CHECK_THAT(hw::describe(now), Catch::Contains("gathers a recomputed layer again"));

  const std::string sources = R"({"sources": {"s": {"description": "d", "date": "2026", "verified": false}}})";
  auto stack = [](const std::string& fields, const std::string& srcs) {
    return R"({"software": {"x": {"description": "d", "launch": "10us", "kernel_gap": "2us", "layer_hook": "0us",
               "micro_batch": "0us", "step": "0us", "sync_before_optimizer": false)" + fields + R"(,
               "sources": {"launch": "s", "kernel_gap": "s", "layer_hook": "s", "micro_batch": "s", "step": "s",
                           "sync_before_optimizer": "s")" + srcs + "}}}}";
  };
  auto load = [&](const std::string& text) { return hw::Catalog::from_texts({{"sources.json", sources}, {"software.json", text}}); };
  const std::string both = R"(, "zero3_tensor_sync": "s", "zero3_tensor_issue": "s")";
  CHECK(load(stack(R"(, "zero3_tensor_sync": true, "zero3_tensor_issue": "1ms")", both)).software("x").zero3_tensor_issue_s == Approx(1e-3));
  CHECK_FALSE(load(stack("", "")).software("x").zero3_tensor_sync);
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": true)", "")), "/software/x/sources");  // no source
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": "yes")", R"(, "zero3_tensor_sync": "s")")), "/software/x/zero3_tensor_sync");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": true, "zero3_tensor_issue": "-1us")", both)), "/software/x/zero3_tensor_issue");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": true, "zero3_tensor_issue": "2s")", both)), "100 ms");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": false, "zero3_tensor_issue": "1us")", both)), "only with");
  // Per-rank view and copy costs: durations up to 1 ms, sourced, only with zero3_tensor_sync.
  const std::string ranks = R"(, "zero3_tensor_sync": "s", "zero3_rank_view": "s", "zero3_rank_copy": "s")";
  const hw::SoftwareStack per_rank =
      load(stack(R"(, "zero3_tensor_sync": true, "zero3_rank_view": "5us", "zero3_rank_copy": "4us")", ranks)).software("x");
  CHECK(per_rank.zero3_rank_view_s == Approx(5e-6));
  CHECK(per_rank.zero3_rank_copy_s == Approx(4e-6));
  CHECK(load(stack("", "")).software("x").zero3_rank_view_s == 0);
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": true, "zero3_rank_view": "5us")", R"(, "zero3_tensor_sync": "s")")),
                         "/software/x/sources");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": true, "zero3_rank_copy": "-1us")", ranks)), "/software/x/zero3_rank_copy");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": true, "zero3_rank_view": "2ms")", ranks)), "1 ms");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_tensor_sync": false, "zero3_rank_view": "1us")", ranks)), "only with");
  CHECK(load(stack(R"(, "grad_epilogue": true)", R"(, "grad_epilogue": "s")")).software("x").grad_epilogue);
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_epilogue": true)", "")), "/software/x/sources");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_epilogue": "yes")", R"(, "grad_epilogue": "s")")), "/software/x/grad_epilogue");
  CHECK(load(stack(R"(, "zero3_recompute_gathers": true)", R"(, "zero3_recompute_gathers": "s")")).software("x").zero3_recompute_gathers);
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_recompute_gathers": true)", "")), "/software/x/sources");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "zero3_recompute_gathers": 1)", R"(, "zero3_recompute_gathers": "s")")),
                         "/software/x/zero3_recompute_gathers");
  // The fused-attention kernels: the GPU's best unless a stack names the flash-attn 2 package
  // (llm-foundry's "gpu" extra pins it); named with a source, and only that value.
  CHECK(cat.software("pytorch-fsdp").fused_attention == "flash-attn-2");
  CHECK(cat.software("pytorch-fsdp").sources.at("fused_attention") == "llm_foundry_flash_attn2");
  CHECK(cat.software("megatron-core").fused_attention.empty());
  CHECK_THAT(hw::describe(cat.software("pytorch-fsdp")), Catch::Contains("flash-attn 2 package"));
  CHECK(load(stack(R"(, "fused_attention": "flash-attn-2")", R"(, "fused_attention": "s")")).software("x").fused_attention == "flash-attn-2");
  CHECK(load(stack("", "")).software("x").fused_attention.empty());
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "fused_attention": "flash-attn-2")", "")), "/software/x/sources");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "fused_attention": "flash3")", R"(, "fused_attention": "s")")),
                         "/software/x/fused_attention: unknown fused attention \"flash3\"");
  // Gradient reductions wider than the training precision: Megatron-LM (bf16 and FP8 runs
  // under --bf16: fp32, with fp32 main grads), Composer's FSDP DEFAULT (fp32); each sourced.
  CHECK(cat.software("megatron-lm").grad_reduce_precision(Precision::bf16) == Precision::fp32);
  CHECK(cat.software("megatron-lm").grad_reduce_precision(Precision::fp8) == Precision::fp32);
  CHECK(cat.software("megatron-lm").grad_reduce_precision(Precision::fp16) == Precision::fp16);
  CHECK(cat.software("megatron-lm").fp32_main_grads);
  CHECK(cat.software("megatron-lm").sources.at("grad_reduce") == "megatron_lm_bf16_fp32_grads");
  CHECK(cat.software("pytorch-fsdp").grad_reduce_precision(Precision::bf16) == Precision::fp32);
  CHECK_FALSE(cat.software("pytorch-fsdp").fp32_main_grads);
  CHECK(cat.software("pytorch-fsdp").sources.at("grad_reduce") == "composer_fsdp_mixed_precision");
  CHECK(cat.software("megatron-core").grad_reduce_precision(Precision::bf16) == Precision::bf16);
  CHECK(cat.software("pytorch-eager").grad_reduce_precision(Precision::fp16) == Precision::fp32);  // AMP's fp32 parameters
  CHECK(cat.software("pytorch-eager").sources.at("grad_reduce") == "pytorch_amp_fp32_grads");
  CHECK_THAT(hw::describe(cat.software("megatron-lm")), Catch::Contains("reduces bf16 in fp32, fp8 in fp32 gradients (fp32 main grads)"));
  const std::string gr = R"(, "grad_reduce": "s")";
  CHECK(load(stack(R"(, "grad_reduce": {"bf16": "fp32"})", gr)).software("x").grad_reduce_precision(Precision::bf16) == Precision::fp32);
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_reduce": {"bf16": "fp32"})", "")), "/software/x/sources");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_reduce": {"bf17": "fp32"})", gr)), "unknown training precision \"bf17\"");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_reduce": {"fp32": "bf16"})", gr)), "/software/x/grad_reduce/fp32: reduces fp32 gradients in bf16");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_reduce": {"bf16": "fp64"})", gr)), "/software/x/grad_reduce/bf16");
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "grad_reduce": {"bf16": "fp8"})", gr)), "/software/x/grad_reduce/bf16");  // no fp8 reductions
  REQUIRE_ERROR_CONTAINS(load(stack(R"(, "fp32_main_grads": 1)", R"(, "fp32_main_grads": "s")")), "/software/x/fp32_main_grads");
}
