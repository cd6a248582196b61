// FP8 training in the compute model: the block linears at the FP8 peak and FP8 GEMM share
// plus their quantization kernels; the LM head and attention at the 16-bit rates.
#include <algorithm>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/op_cost.hpp"
#include "trainplan/simulator/compute_model.hpp"

using namespace trainplan;

TEST_CASE("compute: under fp8 a block linear runs at the sustained FP8 rate plus its casts, the LM head at bf16's", "[simulator][fp8]") {
  const hw::GpuSpec& h100 = hw::Catalog::builtin().gpu("H100-SXM5-80GB");
  sim::ComputeModelOptions o;
  o.kernel_overhead_s = 0;
  o.gemm_shape_effects = false;
  const sim::ComputeModel fp8(h100, Precision::fp8, o), bf16(h100, Precision::bf16, o);
  models::ModelSpec spec = models::ModelCatalog::builtin().spec("llama2-7b");
  spec.seq_len = 4096;
  const models::ModelGraph g = models::build_graph(spec);
  const double peak8 = h100.peak_flops.at(Precision::fp8), peak16 = h100.peak_flops.at(Precision::bf16);
  // fp8 GEMMs at the catalog's sustained FP8 share (estimated from the FP8 MAMF and bf16's
  // sustained/MAMF ratio); the 16-bit ones at the sustained bf16 share.
  const double e8 = *h100.sustained_matmul_fraction(Precision::fp8), e16 = *h100.sustained_matmul_fraction(Precision::bf16);
  CHECK(e8 == Approx(*h100.mamf_fraction(Precision::fp8) * 687.7 / 794.5).epsilon(1e-4));
  const double bw = h100.memory_bandwidth_bytes_per_s * 0.80;  // memory-bound kernels at 80 % of HBM
  plan::Fp8Context f{{plan::Fp8Recipe::current, 1024, false}, 8};
  for (const auto& op : g.ops()) {
    if (op.kind != models::OpKind::linear || op.unit != 1) continue;
    CAPTURE(op.name);
    const plan::OpCost c = plan::op_cost(op, 2, 1, false, Precision::fp8, plan::AttentionImpl::flash, 1, 1, 1.0, &f);
    REQUIRE(c.fp8_gemm);
    const double fwd = std::max(c.flops_fwd / (peak8 * e8), c.mem_fwd_bytes / bw) + c.serial_mem_fwd_bytes / bw;
    const double bwd = std::max(c.flops_bwd / (peak8 * e8), c.mem_bwd_bytes / bw) + c.serial_mem_bwd_bytes / bw;
    CHECK(fp8.op_duration_s(c, plan::Phase::forward) == Approx(fwd).epsilon(1e-12));
    CHECK(fp8.op_duration_s(c, plan::Phase::backward) == Approx(bwd).epsilon(1e-12));
    // The casts are what FP8 pays over its halved GEMM time: here (current scaling, 2 x 4096
    // tokens) quantizing X and dY costs 6 bytes per element of each.
    CHECK(c.fp8_cast_fwd_bytes > 6.0 * static_cast<double>(c.gemm_m * c.gemm_k));
  }
  const models::Op* head = nullptr;
  for (const auto& op : g.ops())
    if (op.name == "head.lm") head = &op;
  REQUIRE(head != nullptr);
  const plan::OpCost hc8 = plan::op_cost(*head, 2, 1, false, Precision::fp8, plan::AttentionImpl::flash, 1, 1, 1.0, &f);
  const plan::OpCost hc16 = plan::op_cost(*head, 2, 1, false, Precision::bf16, plan::AttentionImpl::flash, 1);
  REQUIRE_FALSE(hc8.fp8_gemm);
  CHECK(fp8.op_duration_s(hc8, plan::Phase::forward) == Approx(bf16.op_duration_s(hc16, plan::Phase::forward)).epsilon(1e-12));
  CHECK(fp8.op_duration_s(hc8, plan::Phase::forward) ==
        Approx(std::max(hc8.flops_fwd / (peak16 * e16), hc8.mem_fwd_bytes / bw)).epsilon(1e-12));
  // Attention: the same kernel time as in bf16 training.
  for (const auto& op : g.ops())
    if (op.kind == models::OpKind::attention && op.unit == 1) {
      const plan::OpCost a8 = plan::op_cost(op, 2, 1, false, Precision::fp8, plan::AttentionImpl::flash, 1, 1, 1.0, &f);
      const plan::OpCost a16 = plan::op_cost(op, 2, 1, false, Precision::bf16, plan::AttentionImpl::flash, 1);
      CHECK(fp8.op_duration_s(a8, plan::Phase::backward) == Approx(bf16.op_duration_s(a16, plan::Phase::backward)).epsilon(1e-12));
    }
}
