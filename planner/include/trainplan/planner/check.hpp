// File: trainplan/planner/check.hpp
//
// `trainplan check` in numbers: a validated plan's memory per pipeline stage and its
// analytical step estimate, with the time and on-demand cost of its training tokens.
//
//   plan::PlanContext ctx = plan::resolve(p, catalog, "plan.json");
//   plan::validate(p, ctx, "plan.json");
//   json::Json j = planner::check_json(p, ctx);
//   j["fits"]; j["memory_per_stage"][0]["total_bytes"]; j["estimate"]["step_time_s"]
#pragma once

#include "trainplan/core/json.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/analytical.hpp"

namespace trainplan::planner {

/// One pipeline rank's memory (bytes; total_bytes and fits included).
json::Json to_json(const plan::MemoryBreakdown& memory);
/// The analytical estimate (seconds; exposed communication by purpose).
json::Json to_json(const StepEstimate& estimate);

/// {"model", "instance_type", "instance_count", "gpus", "memory_per_stage": [...], "fits",
/// "peak_memory_bytes", "estimate": {...}} and, when the plan has training_tokens, "steps",
/// "time_to_train_s" and "cost_on_demand_usd" (null without a price).
json::Json check_json(const plan::Plan& plan, const plan::PlanContext& ctx);

}  // namespace trainplan::planner
