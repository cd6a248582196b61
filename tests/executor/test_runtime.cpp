// The runtime on one rank against the independent reference models (GptModel, MlpModel, which
// assemble the same kernels by hand): the op-by-op interpretation of the model graph computes
// the same loss, gradients and updated parameters. Plus the runtime's measurement outputs.
#include <cmath>
#include <map>

#include "runtime_fixture.hpp"
#include "trainplan/executor/gpt.hpp"
#include "trainplan/executor/mlp.hpp"
#include "trainplan/executor/registry.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

namespace {

// Same kernels, but different association of a few sums (residual gradients, clipping norm):
// float32 agreement to a few ulps of the largest element.
constexpr double kReferenceTolerance = 2e-5;

// Graph parameter name -> GptModel parameter name.
std::string gpt_reference_name(const std::string& n) {
  if (n == "embed.token.weight") return "wte";
  if (n == "embed.position.weight") return "wpe";
  if (n.rfind("head.norm.", 0) == 0) return "norm_f." + n.substr(10);
  if (n == "head.lm.weight") return "lm_head.weight";
  // blockL.* (1-based) -> block(L-1).*, mlp.fc1 -> mlp.fc, mlp.fc2 -> mlp.proj
  const size_t dot = n.find('.');
  const int layer = std::stoi(n.substr(5, dot - 5));
  std::string rest = n.substr(dot);
  if (rest.rfind(".mlp.fc1", 0) == 0) rest = ".mlp.fc" + rest.substr(8);
  if (rest.rfind(".mlp.fc2", 0) == 0) rest = ".mlp.proj" + rest.substr(8);
  return "block" + std::to_string(layer - 1) + rest;
}

}  // namespace

TEST_CASE("executor: one-rank runtime step equals the hand-assembled GptModel", "[executor][runtime]") {
  RunSpec spec;
  spec.model = "tiny-gpt";
  spec.global_batch = 4;
  auto resolved = resolve_run(spec);
  Runtime rt(resolved->plan, resolved->ctx, plan::lower(resolved->plan, resolved->ctx), test_options());

  // The reference with the runtime's initial parameters.
  const models::ModelSpec& ms = resolved->ctx.graph.spec();
  GptConfig cfg = GptConfig::from_spec(ms);
  auto be = make_backend("cpu");
  Stream& s = be->default_stream();
  GptModel ref(*be, cfg, spec.global_batch, DType::f32, 99);
  ParameterStore& store = ref.parameters();
  std::vector<std::string> names = rt.parameter_names();
  REQUIRE(names.size() == store.size());
  for (const std::string& n : names) {
    INFO(n);
    const size_t i = store.index(gpt_reference_name(n));
    REQUIRE(store.spec(i).shape == rt.parameter_shape(n));
    be->upload_values(s, store.param(i), rt.parameter(n));
  }
  // The same samples: step 0, samples 0..3 of the synthetic data.
  const TrainingData data = TrainingData::synthetic(ms, ms.seq_len, RuntimeOptions{}.data_seed);
  std::vector<int32_t> tokens(static_cast<size_t>(spec.global_batch * ms.seq_len)), targets(tokens.size());
  for (int64_t i = 0; i < spec.global_batch; ++i)
    data.token_sample(0, i, std::span<int32_t>(tokens).subspan(static_cast<size_t>(i * ms.seq_len), static_cast<size_t>(ms.seq_len)),
                      std::span<int32_t>(targets).subspan(static_cast<size_t>(i * ms.seq_len), static_cast<size_t>(ms.seq_len)));
  store.zero_grads(s);
  const double ref_loss = ref.forward(s, tokens, targets);
  ref.backward(s);

  const StepResult r = rt.step();
  CHECK(r.loss == Approx(ref_loss).epsilon(1e-6));
  for (const std::string& n : names) {
    INFO(n);
    CHECK(relative_error(rt.gradient(n), be->download_values(s, store.grad(store.index(gpt_reference_name(n))))) <
          kReferenceTolerance);
  }
  const RuntimeOptions o;
  const double ref_norm = store.clip_and_step(s, o.adamw, o.max_grad_norm);
  CHECK(r.grad_norm == Approx(ref_norm).epsilon(1e-5));
  for (const std::string& n : names) {
    INFO(n);
    CHECK(relative_error(rt.parameter(n), be->download_values(s, store.param(store.index(gpt_reference_name(n))))) <
          kReferenceTolerance);
  }
}

TEST_CASE("executor: one-rank runtime step equals the hand-assembled MlpModel", "[executor][runtime]") {
  RunSpec spec;
  spec.model = "tiny-mlp";
  spec.global_batch = 8;
  auto resolved = resolve_run(spec);
  Runtime rt(resolved->plan, resolved->ctx, plan::lower(resolved->plan, resolved->ctx), test_options());
  const models::ModelSpec& ms = resolved->ctx.graph.spec();
  auto be = make_backend("cpu");
  Stream& s = be->default_stream();
  MlpModel ref(*be, MlpConfig::from_spec(ms), spec.global_batch, DType::f32, 5);
  ParameterStore& store = ref.parameters();
  const std::vector<std::string> names = rt.parameter_names();
  REQUIRE(names.size() == store.size());
  // Graph layers input.fc, block1.fc, ..., head.fc are MlpModel's fc0, fc1, ...
  auto ref_index = [&](size_t i) { return i; };  // same order: weight, bias per layer
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    REQUIRE(store.spec(ref_index(i)).shape == rt.parameter_shape(names[i]));
    be->upload_values(s, store.param(ref_index(i)), rt.parameter(names[i]));
  }
  const TrainingData data = TrainingData::synthetic(ms, 1, RuntimeOptions{}.data_seed);
  const int64_t w = ms.mlp_widths.front();
  std::vector<double> features(static_cast<size_t>(spec.global_batch * w));
  std::vector<int32_t> labels(static_cast<size_t>(spec.global_batch));
  for (int64_t i = 0; i < spec.global_batch; ++i)
    data.feature_sample(0, i, std::span<double>(features).subspan(static_cast<size_t>(i * w), static_cast<size_t>(w)),
                        labels[static_cast<size_t>(i)]);
  store.zero_grads(s);
  const double ref_loss = ref.forward(s, features, labels);
  ref.backward(s);
  const StepResult r = rt.step();
  CHECK(r.loss == Approx(ref_loss).epsilon(1e-6));
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    CHECK(relative_error(rt.gradient(names[i]), be->download_values(s, store.grad(ref_index(i)))) < kReferenceTolerance);
  }
  const RuntimeOptions o;
  store.clip_and_step(s, o.adamw, o.max_grad_norm);
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    CHECK(relative_error(rt.parameter(names[i]), be->download_values(s, store.param(ref_index(i)))) < kReferenceTolerance);
  }
}

TEST_CASE("executor: runtime records a measured timeline task by task, in the simulator's format",
          "[executor][runtime]") {
  RunSpec spec;
  spec.dp = 2;
  spec.tp = 2;
  spec.global_batch = 4;
  auto rt = make_runtime(spec);
  const StepResult r = rt->step();
  const plan::Timeline& tl = r.timeline;
  CHECK(tl.source == "measured cpu");
  CHECK(tl.streams == rt->program().streams);
  REQUIRE(tl.peak_memory_bytes.size() == 4);
  size_t tasks = 0;
  for (const auto& rp : rt->program().ranks) tasks += rp.tasks.size();
  REQUIRE(tl.events.size() == tasks);
  // Every task once, sorted by (rank, task), with the program's stream, kind, label and sizes.
  size_t i = 0;
  for (const auto& rp : rt->program().ranks)
    for (const auto& t : rp.tasks) {
      const plan::TimelineEvent& e = tl.events[i++];
      INFO(t.label);
      CHECK(e.rank == rp.rank);
      CHECK(e.task == t.id);
      CHECK(e.stream == t.stream);
      CHECK(e.kind == t.kind);
      CHECK(e.label == t.label);
      CHECK(e.flops == t.flops);
      CHECK(e.start_s >= 0);
      CHECK(e.end_s >= e.start_s);
      CHECK(e.end_s <= tl.step_time_s);
      // A task ends after each of its dependencies ended (measured on one clock).
      for (int d : t.deps) CHECK(tl.events[i - 1 - static_cast<size_t>(t.id - d)].end_s <= e.end_s);
    }
  for (double m : r.peak_memory_bytes) CHECK(m > 0);
  for (double m : r.declared_peak_memory_bytes) CHECK(m > 0);
  // It round-trips through the timeline file format.
  const plan::Timeline back = plan::timeline_from_json(plan::to_json(tl), "measured");
  CHECK(back.events.size() == tl.events.size());
  CHECK(back.step_time_s == tl.step_time_s);
}

TEST_CASE("executor: gradient buckets are reduced in the order of the program, on its dp stream",
          "[executor][runtime]") {
  RunSpec spec;
  spec.dp = 2;
  spec.bucket_size_bytes = 4000;  // several buckets
  auto rt = make_runtime(spec);
  const StepResult r = rt->step();
  for (const auto& rp : rt->program().ranks) {
    std::vector<const plan::TimelineEvent*> buckets;
    for (const auto& e : r.timeline.events)
      if (e.rank == rp.rank && e.kind == plan::TaskKind::collective && rp.tasks[static_cast<size_t>(e.task)].role == plan::TensorRole::grads &&
          !rp.tasks[static_cast<size_t>(e.task)].ops.empty())
        buckets.push_back(&e);
    REQUIRE(buckets.size() >= 3);
    for (size_t i = 1; i < buckets.size(); ++i) {
      INFO(buckets[i]->label);
      CHECK(buckets[i - 1]->task < buckets[i]->task);
      CHECK(buckets[i - 1]->start_s <= buckets[i]->start_s);
      CHECK(buckets[i]->stream == buckets[0]->stream);
    }
  }
}

TEST_CASE("executor: runs are deterministic: the same plan twice gives bit-identical losses and parameters",
          "[executor][runtime]") {
  RunSpec spec;
  spec.dp = 2, spec.tp = 2, spec.pp = 2, spec.zero = 1, spec.sp = true, spec.micro_batch = 2;
  auto a = make_runtime(spec), b = make_runtime(spec);
  for (int i = 0; i < 2; ++i) CHECK(a->step().loss == b->step().loss);
  for (const std::string& n : a->parameter_names()) {
    INFO(n);
    CHECK(a->parameter(n) == b->parameter(n));
    CHECK(a->gradient(n) == b->gradient(n));
  }
}

TEST_CASE("executor: training lowers the loss of the synthetic data", "[executor][runtime]") {
  RunSpec spec;
  spec.dp = 2, spec.tp = 2;
  RuntimeOptions o = test_options();
  o.adamw.learning_rate = 1e-2;
  auto rt = make_runtime(spec, o);
  const double first = rt->step().loss;
  double last = first;
  for (int i = 0; i < 39; ++i) last = rt->step().loss;
  // Uniform guessing over 128 tokens costs ln 128 = 4.85; the data follow a fixed successor
  // 75% of the time, which the model picks up within tens of steps (3.8 after 40 at lr 1e-2).
  CHECK(first == Approx(std::log(128.0)).epsilon(0.05));
  CHECK(last < first - 0.75);
}
