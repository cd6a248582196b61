// Checkpoint and resume: a run interrupted after k steps and resumed from its checkpoint gives
// bit for bit the losses and parameters of the uninterrupted run (what spot interruptions rely
// on); checkpoints of another model or layout, or incomplete ones, are refused with the reason.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "runtime_fixture.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::path(TRAINPLAN_BINARY_DIR) / "test-tmp" / ("executor-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

}  // namespace

TEST_CASE("executor: resuming from a checkpoint gives exactly the losses of an uninterrupted run",
          "[executor][checkpoint]") {
  std::vector<RunSpec> specs;
  RunSpec a;  // ZeRO-1 over dp 2, 2 pipeline stages (tied embedding copies), 2 micro-batches
  a.dp = 2, a.pp = 2, a.zero = 1, a.micro_batch = 2;
  specs.push_back(a);
  RunSpec b;  // ZeRO-3: parameters at rest are shards; tensor parallel slices
  b.dp = 2, b.tp = 2, b.zero = 3;
  specs.push_back(b);
  RunSpec c;
  c.model = "tiny-mlp", c.dp = 4, c.zero = 2;
  specs.push_back(c);
  for (const RunSpec& s : specs) {
    DYNAMIC_SECTION(s.model << " dp" << s.dp << " tp" << s.tp << " pp" << s.pp << " zero" << s.zero) {
      TempDir dir("resume");
      auto whole = make_runtime(s);
      std::vector<double> uninterrupted;
      for (int i = 0; i < 4; ++i) uninterrupted.push_back(whole->step().loss);

      auto first = make_runtime(s);
      first->step();
      first->step();
      first->save_checkpoint(checkpoint_folder(dir.str(), first->steps_done()));
      first.reset();  // the spot instance is gone

      auto resumed = make_runtime(s);
      const std::string latest = latest_checkpoint(dir.str());
      REQUIRE(latest == checkpoint_folder(dir.str(), 2));
      resumed->load_checkpoint(latest);
      CHECK(resumed->steps_done() == 2);
      CHECK(resumed->step().loss == uninterrupted[2]);  // bit for bit
      CHECK(resumed->step().loss == uninterrupted[3]);
      for (const std::string& n : whole->parameter_names()) {
        INFO(n);
        CHECK(resumed->parameter(n) == whole->parameter(n));
      }
      // One file per rank and the manifest.
      for (int r = 0; r < s.dp * s.tp * s.pp; ++r)
        CHECK(fs::is_regular_file(fs::path(latest) / fmt::format("rank-{:05d}.bin", r)));
    }
  }
}

TEST_CASE("executor: a checkpoint of another model or plan layout, or an incomplete one, is refused",
          "[executor][checkpoint]") {
  TempDir dir("refuse");
  RunSpec s;
  s.dp = 2;
  auto rt = make_runtime(s);
  rt->step();
  const std::string ckpt = checkpoint_folder(dir.str(), 1);
  rt->save_checkpoint(ckpt);

  RunSpec mlp;
  mlp.model = "tiny-mlp";
  mlp.dp = 2;
  REQUIRE_ERROR_CONTAINS(make_runtime(mlp)->load_checkpoint(ckpt), "the checkpoint is of model \"tiny-gpt\", the plan trains \"tiny-mlp\"");
  RunSpec tp = s;
  tp.dp = 1, tp.tp = 2;
  REQUIRE_ERROR_CONTAINS(make_runtime(tp)->load_checkpoint(ckpt), "written with dp 2, the plan has 1");
  RunSpec zero = s;
  zero.zero = 1;
  REQUIRE_ERROR_CONTAINS(make_runtime(zero)->load_checkpoint(ckpt), "written with zero_stage 0, the plan has 1");
  REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(dir.str() + "/missing"), "manifest.json is missing");
  CHECK(latest_checkpoint(dir.str() + "/missing") == "");

  // A rank file cut short.
  const fs::path rank1 = fs::path(ckpt) / "rank-00001.bin";
  fs::resize_file(rank1, fs::file_size(rank1) / 2);
  REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "truncated");
  fs::remove(rank1);
  REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "cannot open the checkpoint file");
}
