// The search with --precision fp8 / --fp8-recipe: only GPUs with FP8 tensor cores, every plan
// carries the recipe, and a named instance type without it is an error naming the flag.
#include "test_support.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/planner/search_io.hpp"

using namespace trainplan;

namespace {
planner::SearchOptions llama_search() {
  planner::SearchOptions o;
  o.model = "llama2-7b";
  o.tokens = "1e11";
  o.counts = "1";
  o.micro_batches = "1,2";
  o.zero = "1";
  o.recompute = "none";
  o.schedules = "1f1b";
  o.simulate_top = 0;
  o.threads = 1;
  return o;
}
}  // namespace

TEST_CASE("search: --precision fp8 keeps GPUs with FP8 and puts the recipe in every plan", "[planner][fp8]") {
  planner::SearchOptions o = llama_search();
  o.precision = "fp8";
  o.fp8_recipe = "current";
  const planner::SearchRequest req = planner::search_request(o);
  REQUIRE(req.precision == Precision::fp8);
  CHECK(req.fp8.recipe == plan::Fp8Recipe::current);
  const planner::SearchResult res = planner::search(req, hw::Catalog::builtin());
  REQUIRE_FALSE(res.ranked.empty());
  for (const auto& c : res.ranked) {
    CHECK(c.plan.precision == Precision::fp8);
    CHECK(c.plan.fp8.recipe == plan::Fp8Recipe::current);
    const auto& cat = hw::Catalog::builtin();
    CHECK(cat.gpu(cat.instance(c.plan.instance_type).gpu).supports(Precision::fp8));
  }
}

TEST_CASE("search: FP8 flags that cannot apply are errors naming the flag", "[planner][fp8]") {
  planner::SearchOptions o = llama_search();
  o.fp8_recipe = "delayed";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--fp8-recipe: an FP8 recipe without FP8 training");
  o.precision = "fp8";
  o.instances = "p4d.24xlarge";
  REQUIRE_ERROR_CONTAINS(planner::search(planner::search_request(o), hw::Catalog::builtin()), "--precision");
  o.instances = "p5.48xlarge";
  o.fp8_recipe = "mxfp8";
  REQUIRE_ERROR_CONTAINS(planner::search(planner::search_request(o), hw::Catalog::builtin()), "--fp8-recipe");
  o.precision = "fp9";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--precision");
}
