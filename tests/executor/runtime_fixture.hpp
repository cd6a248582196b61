// Plans for the runtime tests: the tiny models of tests/executor/data on dp * tp * pp
// single-GPU instances (the executor ignores the hardware and runs every rank as a thread),
// lowered with plan::lower, and the comparison of two runs parameter by parameter.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trainplan/executor/runtime.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::executor::testing {

/// A tiny model file of tests/executor/data.
inline std::string tiny_model(const std::string& name) {
  return std::string(TRAINPLAN_SOURCE_DIR) + "/tests/executor/data/" + name + ".json";
}

struct RunSpec {
  std::string model = "tiny-gpt";
  int dp = 1, tp = 1, pp = 1, vp = 1;
  int ep = 1;                       // expert parallelism (MoE models)
  double capacity_factor = 0;       // MoE capacity factor (0: dropless)
  int zero = 0;
  bool sp = false;
  plan::Recompute recompute = plan::Recompute::none;
  plan::Schedule schedule = plan::Schedule::one_f_one_b;
  int64_t global_batch = 8;
  int64_t micro_batch = 0;       // 0: global_batch / dp (one micro-batch)
  double bucket_size_bytes = 2000;  // small: several gradient buckets per stage
  bool overlap = true;
  plan::DpAlgorithm algorithm = plan::DpAlgorithm::ring;
  plan::Granularity granularity = plan::Granularity::op;
};

struct Resolved {
  plan::Plan plan;
  plan::PlanContext ctx;
};

inline std::unique_ptr<Resolved> resolve_run(const RunSpec& s) {
  plan::Plan p;
  p.model = tiny_model(s.model);
  p.instance_type = "g5.xlarge";  // one GPU per instance
  p.instance_count = s.dp * s.tp * s.pp;
  p.dp = s.dp, p.tp = s.tp, p.pp = s.pp, p.vp = s.vp;
  p.ep = s.ep;
  p.moe_capacity_factor = s.capacity_factor;
  p.zero_stage = s.zero;
  p.sequence_parallel = s.sp;
  p.recompute = s.recompute;
  p.schedule = s.schedule;
  p.global_batch = s.global_batch;
  p.micro_batch = s.micro_batch > 0 ? s.micro_batch : s.global_batch / s.dp;
  p.num_micro_batches = s.global_batch / (p.micro_batch * s.dp);
  p.bucket_size_bytes = s.bucket_size_bytes;
  p.overlap_grad_reduce = s.overlap;
  p.dp_algorithm = s.algorithm;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  return std::make_unique<Resolved>(Resolved{std::move(p), std::move(ctx)});
}

inline RuntimeOptions test_options() {
  RuntimeOptions o;
  o.keep_gradients = true;
  o.timeout_s = 20;
  return o;
}

inline std::unique_ptr<Runtime> make_runtime(const RunSpec& s, RuntimeOptions options = test_options()) {
  auto r = resolve_run(s);
  plan::LowerOptions lower;
  lower.granularity = s.granularity;
  return std::make_unique<Runtime>(r->plan, r->ctx, plan::lower(r->plan, r->ctx, lower), std::move(options));
}

/// max |a - b| / max |b| over one tensor (0 when both are zero).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

/// What a step leaves behind, for comparisons.
struct StepRecord {
  std::vector<double> losses;
  std::vector<std::vector<double>> grads, params;  // last step, in parameter_names() order
  std::vector<std::string> implicit;               // communication the runtime had to add
};

inline StepRecord run_steps(Runtime& rt, int steps) {
  StepRecord rec;
  for (int i = 0; i < steps; ++i) {
    const StepResult r = rt.step();
    rec.losses.push_back(r.loss);
    for (const auto& note : r.timeline.meta["implicit_communication"]) rec.implicit.push_back(note.get<std::string>());
  }
  for (const std::string& n : rt.parameter_names()) {
    rec.grads.push_back(rt.gradient(n));
    rec.params.push_back(rt.parameter(n));
  }
  return rec;
}

/// A parallel run (`got`, by `rt`) computes the single-rank run `ref`: each step's loss and every
/// parameter's gradient and value within `rel_tol` (relative_error per tensor), every copy of
/// every parameter identical, and no communication the runtime had to add to the program.
inline void check_matches_one_rank(const Runtime& rt, const StepRecord& got, const StepRecord& ref, double rel_tol) {
  const std::vector<std::string> names = rt.parameter_names();
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(got.losses[i] == Approx(ref.losses[i]).epsilon(rel_tol));
  }
  for (size_t p = 0; p < names.size(); ++p) {
    INFO(names[p]);
    CHECK(relative_error(got.grads[p], ref.grads[p]) < rel_tol);
    CHECK(relative_error(got.params[p], ref.params[p]) < rel_tol);
  }
  CHECK(rt.check_replicas() == "");
  CHECK(got.implicit.empty());
}

}  // namespace trainplan::executor::testing
