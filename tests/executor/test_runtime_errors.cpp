// Bad input to the runtime fails with an error that names the problem: a model or op the
// executor cannot run, a program of another plan, a plan over the memory limit, and programs
// that break at run time (a rank fails, members of a collective disagree): the step fails
// promptly with the first failing rank's message, it does not hang.

#include "runtime_fixture.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

TEST_CASE("executor: the runtime refuses models and programs it cannot run", "[executor][runtime]") {
  SECTION("an encoder model") {
    plan::Plan p;
    p.model = "bert-tiny";
    p.instance_type = "g5.xlarge";
    p.global_batch = 2;
    p.micro_batch = 2;
    plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
    plan::validate(p, ctx, "test");
    REQUIRE_ERROR_CONTAINS(Runtime(p, ctx, plan::lower(p, ctx), test_options()),
                           "the executor runs model families gpt, llama and mlp, not bert");
  }
  SECTION("variants of imported models that have no kernel yet") {
    // llama-tiny with sliding-window layers, then with a GeGLU MLP, then with multi-head
    // latent attention: refused by op, not run as plain attention or gelu.
    for (int variant = 0; variant < 3; ++variant) {
      models::ModelSpec spec = models::ModelCatalog::builtin().spec("llama-tiny");
      if (variant == 0) {
        spec.sliding_window = 8;
        spec.local_layers = {true, false};
      } else if (variant == 1) {
        spec.activation = models::Activation::geglu;
      } else {
        spec.kv_heads = spec.heads;
        spec.kv_lora_rank = 16;
        spec.qk_nope_head_dim = 8;
        spec.qk_rope_head_dim = 4;
        spec.v_head_dim = 8;
      }
      plan::Plan p;
      p.model = "llama-tiny";
      p.instance_type = "g5.xlarge";
      p.global_batch = 2;
      p.micro_batch = 2;
      plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), spec, "test");
      plan::validate(p, ctx, "test");
      const std::string expected =
          variant == 0   ? "the executor cannot run op \"block1.attn.core\" (attention): no sliding-window"
          : variant == 1 ? "the executor cannot run op \"block1.mlp.act\" (activation): no GeGLU kernel"
                         : "the executor cannot run op \"block1.attn.core\" (attention): no multi-head latent attention";
      REQUIRE_ERROR_CONTAINS(Runtime(p, ctx, plan::lower(p, ctx), test_options()), expected);
    }
  }
  SECTION("a program lowered from another plan") {
    RunSpec a;
    a.dp = 2;
    RunSpec b;
    b.tp = 2;
    auto ra = resolve_run(a), rb = resolve_run(b);
    REQUIRE_ERROR_CONTAINS(Runtime(rb->plan, rb->ctx, plan::lower(ra->plan, ra->ctx), test_options()),
                           "the step program has dp 2, the plan 1");
  }
  SECTION("a backend that is not compiled in, a dtype the cpu does not compute in") {
    auto r = resolve_run(RunSpec{});
    RuntimeOptions o = test_options();
    o.backend = "tpu";
    REQUIRE_ERROR_CONTAINS(Runtime(r->plan, r->ctx, plan::lower(r->plan, r->ctx), o), "unknown backend \"tpu\"");
    o = test_options();
    o.dtype = DType::bf16;
    REQUIRE_ERROR_CONTAINS(Runtime(r->plan, r->ctx, plan::lower(r->plan, r->ctx), o), "does not compute in bf16");
  }
}

TEST_CASE("executor: context parallelism is refused, naming the plan field (the simulator models it)", "[executor][runtime]") {
  plan::Plan p;
  p.model = tiny_model("tiny-gpt");
  p.instance_type = "g5.xlarge";
  p.instance_count = 4;
  p.dp = 2;
  p.cp = 2;
  p.global_batch = 4;
  p.micro_batch = 1;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
  REQUIRE_ERROR_CONTAINS(check_executable(p, "plan.json"),
                         "plan.json: /parallelism/cp: context parallelism (cp = 2) is not executed by the runtime");
  REQUIRE_ERROR_CONTAINS(check_executable(p, "plan.json"), "the simulator models it");
  // The runtime does not run its program either (it fails before building any rank).
  REQUIRE_ERROR_CONTAINS(Runtime(p, ctx, plan::lower(p, ctx), test_options()), "/parallelism/cp: context parallelism");
  p.cp = 1;
  CHECK_NOTHROW(check_executable(p, "plan.json"));
}

TEST_CASE("executor: a Trainium plan is refused, naming the instance type (planned and simulated only)", "[executor][runtime]") {
  plan::Plan p;
  p.model = tiny_model("tiny-gpt");
  p.instance_type = "trn1.32xlarge";  // 16 Trainium chips
  p.dp = 16;
  p.global_batch = 16;
  p.micro_batch = 1;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
  REQUIRE_ERROR_CONTAINS(check_accelerator_executable(ctx, "plan.json"),
                         "plan.json: /cluster/instance_type: trn1.32xlarge (16 x Trainium, runtime \"neuron\") is planned and "
                         "simulated, not executed");
  REQUIRE_ERROR_CONTAINS(check_accelerator_executable(ctx, "plan.json"), "trainplan simulate");
  REQUIRE_ERROR_CONTAINS(Runtime(p, ctx, plan::lower(p, ctx), test_options()), "is planned and simulated, not executed");
  // The same plan on an NVIDIA instance passes the check.
  p.instance_type = "g5.12xlarge";
  plan::PlanContext gpu = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  CHECK_NOTHROW(check_accelerator_executable(gpu, "plan.json"));
}

TEST_CASE("executor: a plan whose declared memory exceeds the limit does not fit, naming the rank",
          "[executor][runtime]") {
  RunSpec s;
  s.pp = 2;
  s.micro_batch = 2;
  auto r = resolve_run(s);
  const plan::StepProgram prog = plan::lower(r->plan, r->ctx);
  const std::vector<double> peaks = declared_peak_memory(prog);
  // The oracle: static bytes + the largest running sum of alloc - free, computed here again.
  for (const auto& rp : prog.ranks) {
    double live = 0, peak = 0;
    for (const auto& t : rp.tasks) {
      live += t.kind == plan::TaskKind::alloc ? t.alloc_bytes : t.kind == plan::TaskKind::free ? -t.alloc_bytes : 0;
      peak = std::max(peak, live);
    }
    CHECK(peaks[static_cast<size_t>(rp.rank)] == rp.static_bytes + peak);
    CHECK(peak > 0);
  }
  const double biggest = std::max(peaks[0], peaks[1]);
  check_memory_limit(prog, biggest);  // fits exactly
  const int worst = peaks[0] >= peaks[1] ? 0 : 1;
  REQUIRE_ERROR_CONTAINS(check_memory_limit(prog, biggest * 0.99),
                         "the plan does not fit: rank " + std::to_string(worst) + " (dp 0, tp 0, pp " + std::to_string(worst) + ")");
}

TEST_CASE("executor: a rank that fails mid-step stops every rank promptly with its message", "[executor][runtime]") {
  // Rank 1 (the last pipeline stage) is told to compute an op of the first stage; rank 0 is
  // then waiting for its activation gradient and must not hang.
  RunSpec s;
  s.pp = 2;
  s.micro_batch = 4;
  auto r = resolve_run(s);
  plan::StepProgram prog = plan::lower(r->plan, r->ctx);
  const int first_stage_op = r->ctx.graph.unit(0).ops.front();
  for (plan::Task& t : prog.ranks[1].tasks)
    if (t.kind == plan::TaskKind::compute && t.phase == plan::Phase::backward) {
      t.op = first_stage_op;
      break;
    }
  RuntimeOptions o = test_options();
  o.timeout_s = 60;
  Runtime rt(r->plan, r->ctx, std::move(prog), o);
  // The failing rank's own message, not a communication timeout: the others were aborted, not
  // left to wait out the 60 s timeout.
  REQUIRE_ERROR_CONTAINS(rt.step(), "step 1 failed: rank 1 failed: rank 1 task");
  REQUIRE_ERROR_CONTAINS(rt.step(), "cannot run another step after a failed one");
}

TEST_CASE("executor: members of a gradient bucket that pack different tensors fail the step naming the collective",
          "[executor][runtime]") {
  RunSpec s;
  s.dp = 2;
  s.bucket_size_bytes = 1e9;  // one bucket
  auto r = resolve_run(s);
  plan::StepProgram prog = plan::lower(r->plan, r->ctx);
  for (plan::Task& t : prog.ranks[1].tasks)
    if (t.kind == plan::TaskKind::collective && t.role == plan::TensorRole::grads && t.ops.size() > 1) {
      t.ops.pop_back();  // rank 1 leaves one op out of the bucket
      break;
    }
  Runtime rt(r->plan, r->ctx, std::move(prog), test_options());
  REQUIRE_ERROR_CONTAINS(rt.step(), "members pass different sizes");
}

TEST_CASE("executor: the collectives path of device ranks: NCCL with one device per rank, else host staging",
          "[executor][runtime]") {
  using DC = DeviceCollectives;
  // The cpu backend has no device path; asking for one is an error.
  CHECK_FALSE(choose_collectives(DC::automatic, "cpu", false, 1, 0, 4).device);
  REQUIRE_ERROR_CONTAINS(choose_collectives(DC::device, "cpu", false, 1, 0, 2), "need a device backend");
  // One device per local rank, from first_device: automatic takes the device path.
  const CollectivesChoice two = choose_collectives(DC::automatic, "cuda", true, 2, 0, 2);
  CHECK(two.device);
  CHECK(two.reason == "device collectives (NCCL) on device tensors: 2 ranks on devices 0..1");
  CHECK(choose_collectives(DC::device, "cuda", true, 8, 6, 2).reason.find("devices 6..7") != std::string::npos);
  CHECK(choose_collectives(DC::automatic, "cuda", true, 1, 0, 1).reason ==
        "device collectives (NCCL) on device tensors: rank on device 0");
  // Two ranks on one GPU (a second process's ranks past the last device): staging, or an error when asked.
  const CollectivesChoice shared = choose_collectives(DC::automatic, "cuda", true, 1, 0, 2);
  CHECK_FALSE(shared.device);
  CHECK(shared.reason ==
        "staged through host memory: 2 ranks from device 0 need 2 devices, this machine has 1; NCCL runs one rank per "
        "device");
  REQUIRE_ERROR_CONTAINS(choose_collectives(DC::device, "cuda", true, 1, 0, 2), "NCCL runs one rank per device");
  REQUIRE_ERROR_CONTAINS(choose_collectives(DC::device, "cuda", true, 8, 7, 2), "need 9 devices, this machine has 8");
  REQUIRE_ERROR_CONTAINS(choose_collectives(DC::device, "cuda", true, 1, 0, 2), "--collectives staging");
  // No library (a module built without NCCL), or staging asked for.
  CHECK(choose_collectives(DC::automatic, "cuda", false, 8, 0, 2).reason.find("built without NCCL") != std::string::npos);
  REQUIRE_ERROR_CONTAINS(choose_collectives(DC::device, "cuda", false, 8, 0, 2), "built without NCCL");
  CHECK(choose_collectives(DC::staging, "cuda", true, 8, 0, 2).reason == "staged through host memory (asked for)");
  CHECK(device_collectives_name(DC::device) == "device");
  // The runtime applies it before any rank starts.
  RuntimeOptions o = test_options();
  o.collectives = DC::device;
  REQUIRE_ERROR_CONTAINS(make_runtime(RunSpec{.dp = 2}, o), "need a device backend");
  o.collectives = DC::automatic;
  CHECK(make_runtime(RunSpec{.dp = 2}, o)->collectives().reason == "host tensors over the world's communicator");
}
