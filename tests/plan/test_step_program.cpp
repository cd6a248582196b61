// plan::check_program() finds each kind of broken program, and plan::to_json() writes every
// field consumers need.
#include "test_lower_fixture.hpp"

using namespace trainplan;

namespace {

plan::StepProgram small_program() {
  testing::PlanSpec s;
  s.model = "gpt-tiny";
  s.dp = 2;
  s.tp = 2;
  s.pp = 2;
  s.micro_batches = 2;
  auto r = testing::resolve_plan(s);
  return plan::lower(r->plan, r->ctx);
}

plan::Task* first(plan::StepProgram& p, int rank, plan::TaskKind kind) {
  for (auto& t : p.ranks[static_cast<size_t>(rank)].tasks)
    if (t.kind == kind) return &t;
  return nullptr;
}

// Two ranks that each wait for the other's send before sending: a deadlock.
plan::StepProgram crossed_sends() {
  plan::StepProgram p;
  p.world_size = 2;
  p.streams = {"compute", "pp-send", "pp-recv"};
  for (int r = 0; r < 2; ++r) {
    plan::RankProgram rp;
    rp.rank = r;
    rp.gpu = r;
    plan::Task recv;
    recv.id = 0;
    recv.kind = plan::TaskKind::recv;
    recv.stream = 2;
    recv.peer = 1 - r;
    recv.bytes = 64;
    recv.comm_id = 1 - r;  // the other rank's send
    plan::Task compute;
    compute.id = 1;
    compute.deps = {0};
    compute.flops = 1e6;
    plan::Task send;
    send.id = 2;
    send.kind = plan::TaskKind::send;
    send.stream = 1;
    send.deps = {1};
    send.peer = 1 - r;
    send.bytes = 64;
    send.comm_id = r;
    rp.tasks = {recv, compute, send};
    p.ranks.push_back(rp);
  }
  return p;
}

}  // namespace

TEST_CASE("lower: check_program accepts a lowered program and reports each broken invariant", "[plan][lower]") {
  const plan::StepProgram good = small_program();
  REQUIRE(plan::check_program(good) == "");

  SECTION("a dependency on a later task") {
    auto p = good;
    p.ranks[0].tasks[3].deps.push_back(7);
    CHECK_THAT(plan::check_program(p), Catch::Contains("is not an earlier task"));
  }
  SECTION("a send without its recv") {
    auto p = good;
    plan::Task* recv = first(p, 2, plan::TaskKind::recv);
    REQUIRE(recv);
    recv->comm_id = 1'000'000'000;
    CHECK_THAT(plan::check_program(p), Catch::Contains("has no matching"));
  }
  SECTION("a recv of the wrong size") {
    auto p = good;
    first(p, 4, plan::TaskKind::recv)->bytes += 2;
    CHECK_THAT(plan::check_program(p), Catch::Contains("differ in bytes"));
  }
  SECTION("a collective member with another size") {
    auto p = good;
    first(p, 1, plan::TaskKind::collective)->bytes *= 2;
    CHECK_THAT(plan::check_program(p), Catch::Contains("differ in kind, group or bytes"));
  }
  SECTION("a collective member missing") {
    auto p = good;
    first(p, 1, plan::TaskKind::collective)->comm_id = 1'000'000'001;
    CHECK_THAT(plan::check_program(p), Catch::Contains("group members have a task"));
  }
  SECTION("a buffer never freed") {
    auto p = good;
    auto& tasks = p.ranks[3].tasks;
    for (auto& t : tasks)
      if (t.kind == plan::TaskKind::free) {
        t.kind = plan::TaskKind::compute;
        break;
      }
    CHECK_THAT(plan::check_program(p), Catch::Contains("is never freed"));
  }
  SECTION("a free of another size") {
    auto p = good;
    for (auto& t : p.ranks[0].tasks)
      if (t.kind == plan::TaskKind::free) {
        t.alloc_bytes += 1;
        break;
      }
    CHECK_THAT(plan::check_program(p), Catch::Contains("allocated with"));
  }
  SECTION("a deadlock") {
    CHECK_THAT(plan::check_program(crossed_sends()), Catch::Contains("deadlocks"));
    auto fixed = crossed_sends();
    fixed.ranks[0].tasks[1].deps.clear();  // rank 0 computes and sends without waiting
    CHECK(plan::check_program(fixed) == "");
  }
  SECTION("a partial program is checked between its lowered ranks only") {
    auto p = good;
    p.ranks[5].tasks.clear();
    CHECK(plan::check_program(p) == "");
  }
}

TEST_CASE("lower: to_json writes programs, groups and every task field consumers read", "[plan][lower]") {
  const plan::StepProgram p = small_program();
  const json::Json j = plan::to_json(p);
  CHECK(j["world_size"] == 8);
  CHECK(j["streams"] == json::Json(p.streams));
  CHECK(j["groups"].size() == p.groups.size());
  CHECK(j["symmetry_class"].size() == 8);
  REQUIRE(j["ranks"].size() == 8);
  std::map<std::string, int> kinds;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const auto& tasks = j["ranks"][r]["tasks"];
    REQUIRE(tasks.size() == p.ranks[r].tasks.size());
    CHECK(j["ranks"][r]["static_bytes"].get<double>() == p.ranks[r].static_bytes);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const auto& t = p.ranks[r].tasks[i];
      const auto& o = tasks[i];
      ++kinds[o["kind"].get<std::string>()];
      CHECK(o["id"] == t.id);
      CHECK(o["deps"] == json::Json(t.deps));
      if (t.kind == plan::TaskKind::compute) {
        CHECK(o["flops"].get<double>() == t.flops);
        CHECK(o["mem_bytes"].get<double>() == t.mem_bytes);
      } else if (t.kind == plan::TaskKind::alloc || t.kind == plan::TaskKind::free) {
        CHECK(o["alloc_bytes"].get<double>() == t.alloc_bytes);
        CHECK(o["buffer_id"] == t.buffer_id);
      } else {
        CHECK(o["bytes"].get<double>() == t.bytes);
        CHECK(o["comm_id"] == t.comm_id);
        CHECK(o["role"] == std::string(plan::tensor_role_name(t.role)));
      }
    }
  }
  for (const char* k : {"compute", "send", "recv", "collective", "alloc", "free"}) CHECK(kinds[k] > 0);
}
