// File: trainplan/planner/classic_plan.hpp
//
// Classic ML as the commands see it: the comparison `plan --model xgboost` prints and `report
// --model xgboost` writes (every instance type x count with its job, break-even rows, sweep and
// managed spot), the job file `plan --model xgboost -o FILE` writes, and the whole job of such a
// file as `trainplan job FILE` computes it. The cost model and the job phases are in
// classic_ml.hpp.
//
//   planner::ClassicRequest req{.spec = {.rows = 892, .features = 8}, .instances = {&m5}, .counts = {1, 2}};
//   std::vector<planner::ClassicRow> rows = planner::compare_classic(req);
//   const planner::ClassicRow& best = planner::best_classic_row(rows, "cost");
//   json::write_file("plan.json", planner::classic_plan_json(req.spec, best, plan::Purchase::on_demand));
//
//   planner::ClassicPlan p = planner::parse_classic_plan(json::parse_file("plan.json"), "plan.json");
//   planner::ClassicJobAnalysis a = planner::analyze_classic_job(p, catalog, job_request);
//
// A classic job file:
//   {"schema_version": 1, "model": "xgboost",
//    "xgboost": {"rows": 892, "features": 8, "rounds": 100, "max_depth": 6, "bins": 256},
//    "cluster": {"instance_type": "ml.m5.large", "count": 1},
//    "training": {"purchase": "on-demand", "platform": "sagemaker"},
//    "predicted": {...}}                            // written by plan, kept, never read as input
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/classic_ml.hpp"
#include "trainplan/planner/job.hpp"

namespace trainplan::planner {

/// The SageMaker phases of a job in order, with their names and whether they are billed (for
/// tables).
struct PhaseInfo {
  const char* name;
  bool billed;
  double JobPhases::*seconds;
};
const std::vector<PhaseInfo>& job_phases();

/// What `plan --model xgboost` compares: every instance type x count, and on request a sweep
/// of such jobs and managed spot.
struct ClassicRequest {
  XgboostSpec spec;
  std::vector<const hw::CpuInstanceType*> instances;
  std::vector<int> counts;
  std::optional<SweepRequest> sweep;
  std::optional<SpotRequest> spot;
};

/// The row count from which `count` instances finish sooner than one, and both jobs there.
struct BreakEven {
  double rows = 0;
  ClassicJob many;   // `count` instances at `rows`
  ClassicJob one;    // one instance at `rows`
};

struct ClassicRow {
  const hw::CpuInstanceType* instance = nullptr;
  ClassicJob job;
  /// count > 1 only: where more instances pay; nullopt with count > 1 = they never do.
  std::optional<BreakEven> break_even;
  std::optional<SweepResult> sweep;
  std::optional<SpotResult> spot;
};

/// The rows of `request`, instance-major. Throws Error naming the flag for a bad spec, count,
/// sweep or spot request.
std::vector<ClassicRow> compare_classic(const ClassicRequest& request);

/// The row a job file is written for, by the search objective ("time", "cost",
/// "cost-under-deadline", "time-under-budget"): the fastest (then cheapest), the cheapest (then
/// fastest), the cheapest within `deadline_s` (else the fastest), the fastest within
/// `budget_usd` (else the cheapest). Rows whose data does not fit in memory come last.
const ClassicRow& best_classic_row(const std::vector<ClassicRow>& rows, const std::string& objective, double deadline_s = 0,
                                   double budget_usd = 0);

/// A classic job file: an XGBoost spec on `count` instances of one type, as a SageMaker job.
struct ClassicPlan {
  XgboostSpec spec;
  std::string instance_type;   // "ml.m5.large"
  int count = 1;
  plan::Purchase purchase = plan::Purchase::on_demand;
  json::Json predicted;        // kept verbatim; never input
};

/// Whether a JSON document is a classic job file ("model": "xgboost").
bool is_classic_plan(const json::Json& doc);
/// Reads a classic job file; unknown fields are errors naming the JSON pointer.
ClassicPlan parse_classic_plan(const json::Json& doc, const std::string& name);
/// The job file of `row`, with the row's job as "predicted".
json::Json classic_plan_json(const XgboostSpec& spec, const ClassicRow& row, plan::Purchase purchase);

/// The whole job of a classic job file as `trainplan job FILE` computes it.
struct ClassicJobAnalysis {
  ClassicPlan plan;
  const hw::CpuInstanceType* instance = nullptr;
  ClassicJob job;                      // as it starts: on a warm pool with --warm-pool
  ClassicJob cold;                     // the same job provisioning its instances
  bool spot = false;
  std::optional<SpotResult> spot_result;
  std::optional<SweepResult> sweep;
  SpotRequest spot_request;            // as given (spot only)
  SweepRequest sweep_request;          // as given (with --repeat only)
  std::vector<std::string> assumptions;  // the warm pool's (the spot model's are in spot_result)
};

/// The request fields that apply to a classic job: purchase (on-demand or spot; the file's when
/// not given), warm_pool, repeat / parallel / keep_alive (on-demand), max_wait / max_run (spot),
/// runs, seed. `purchase_given` says whether --purchase was typed. Throws Error naming the flag.
ClassicJobAnalysis analyze_classic_job(const ClassicPlan& plan, const hw::Catalog& catalog, const JobRequest& request,
                                       bool purchase_given);

/// As `trainplan job --json` writes it for a classic job file.
json::Json to_json(const ClassicJobAnalysis& analysis, const std::string& plan_name);

}  // namespace trainplan::planner
