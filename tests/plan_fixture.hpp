// A resolved, validated plan for tests of the libraries above `plan` (plan, simulator,
// planner): the plan of a model on instances with given degrees, its context, and checks.
#pragma once

#include <string>

#include "trainplan/plan/plan.hpp"

namespace trainplan::testing {

struct ResolvedPlan {
  plan::Plan plan;
  plan::PlanContext ctx;
};

/// Plan of `model` on `count` x `instance` with dp/tp/pp, global batch `gb` and micro-batch
/// `mb` (defaults for everything else), resolved against the built-in catalog and validated.
inline ResolvedPlan resolved_plan(const std::string& model, const std::string& instance, int count, int dp, int tp, int pp,
                                  int64_t gb, int64_t mb = 1) {
  plan::Plan p;
  p.model = model;
  p.instance_type = instance;
  p.instance_count = count;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.global_batch = gb;
  p.micro_batch = mb;
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  return {p, std::move(ctx)};
}

}  // namespace trainplan::testing
