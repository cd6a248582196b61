// Non-finite training: a step whose gradient norm is NaN or infinite never updates the
// parameters; by default the step fails naming the step, the rank and the tensor, and with
// skip_nonfinite_steps it is skipped (its batch consumed) as dynamic loss scaling does.
#include <cmath>

#include "runtime_fixture.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

namespace {

// A learning rate of 1e30 makes AdamW move every weight by about 1e30 in step 1 (its update is
// lr * m / sqrt(v), |m / sqrt(v)| ~ 1), so step 2's activations overflow f32 and its
// gradients are NaN: an oracle that needs no injected value.
RuntimeOptions exploding(bool skip) {
  RuntimeOptions o = test_options();
  o.adamw.learning_rate = 1e30;
  o.skip_nonfinite_steps = skip;
  return o;
}

std::vector<std::vector<double>> all_parameters(const Runtime& rt) {
  std::vector<std::vector<double>> out;
  for (const std::string& n : rt.parameter_names()) out.push_back(rt.parameter(n));
  return out;
}

}  // namespace

TEST_CASE("executor: a NaN gradient norm stops the run naming the step, rank and tensor and updates nothing",
          "[executor][nonfinite]") {
  RunSpec s;
  s.dp = 2, s.pp = 2;
  auto rt = make_runtime(s, exploding(false));
  const StepResult first = rt->step();
  REQUIRE(std::isfinite(first.grad_norm));
  const auto before = all_parameters(*rt);
  REQUIRE_ERROR_CONTAINS(rt->step(), "step 2: the gradient norm is ");
  CHECK(rt->steps_done() == 1);  // the failed step does not count
  CHECK(all_parameters(*rt) == before);
  try {
    rt->step();
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("first non-finite gradient: rank ") != std::string::npos);
    CHECK(what.find(", tensor ") != std::string::npos);
    CHECK(what.find("--skip-nonfinite-steps") != std::string::npos);
  }
}

TEST_CASE("executor: skip_nonfinite_steps skips the update of a NaN step and goes on", "[executor][nonfinite]") {
  RunSpec s;
  s.dp = 2, s.zero = 1;
  auto rt = make_runtime(s, exploding(true));
  CHECK_FALSE(rt->step().skipped);
  const auto before = all_parameters(*rt);
  const StepResult second = rt->step();
  CHECK(second.skipped);
  CHECK_FALSE(std::isfinite(second.grad_norm));
  CHECK(second.nonfinite_where.find("tensor") != std::string::npos);
  CHECK(rt->steps_done() == 2);  // the batch was consumed
  CHECK(all_parameters(*rt) == before);
  CHECK(rt->check_replicas() == "");
}
