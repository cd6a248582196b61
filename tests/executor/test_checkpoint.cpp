// Checkpoint and resume: a run interrupted after k steps and resumed from its checkpoint gives
// bit for bit the losses and parameters of the uninterrupted run (what spot interruptions rely
// on); checkpoints of another model or layout, or incomplete ones, are refused with the reason.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>

#include <fmt/format.h>

#include "runtime_fixture.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/executor/checkpoint.hpp"

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

// Runs one step of `s` and checkpoints it under `dir`; returns the checkpoint folder.
std::string one_step_checkpoint(const TempDir& dir, const RunSpec& s) {
  auto rt = make_runtime(s);
  rt->step();
  const std::string ckpt = checkpoint_folder(dir.str(), 1);
  rt->save_checkpoint(ckpt);
  return ckpt;
}

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
  const std::string ckpt = one_step_checkpoint(dir, s);

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
  REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "rank-00001.bin: the file has");
  REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "(truncated)");
  fs::remove(rank1);
  REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "cannot read the checkpoint shard");
}

namespace {

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}
// Offset of the first record's fields in a version-2 shard (checkpoint.hpp): 48-byte header,
// 8-byte header checksum, then u32 name length, name, u8 dtype, i64 element count, data.
struct FirstRecord {
  size_t name_len_at = 56, name_at = 60, dtype_at = 0, numel_at = 0, data_at = 0;
  std::string name;
};
FirstRecord first_record(const std::vector<char>& b) {
  FirstRecord r;
  uint32_t len = 0;
  std::memcpy(&len, b.data() + r.name_len_at, 4);
  r.name.assign(b.data() + r.name_at, len);
  r.dtype_at = r.name_at + len;
  r.numel_at = r.dtype_at + 1;
  r.data_at = r.numel_at + 8;
  return r;
}

}  // namespace

TEST_CASE("executor: a corrupted checkpoint is refused naming the file and the tensor, before any allocation",
          "[executor][checkpoint]") {
  TempDir dir("corrupt");
  RunSpec s;
  s.dp = 2;
  const std::string ckpt = one_step_checkpoint(dir, s);
  const fs::path rank1 = fs::path(ckpt) / "rank-00001.bin";
  const std::vector<char> good = read_bytes(rank1);
  const FirstRecord rec = first_record(good);
  REQUIRE(rec.name.find(":value") != std::string::npos);
  const std::string manifest = (fs::path(ckpt) / "manifest.json").string();
  const std::string manifest_text = json::read_text_file(manifest);

  // Each damaged copy is checked by the shard parser itself (per-tensor checksum, sizes
  // against the bytes present) and through load_checkpoint (manifest size and hash first).
  auto parse = [&](const std::vector<char>& b) {
    checkpoint::parse_shard(std::as_bytes(std::span(b.data(), b.size())), rank1.string());
  };
  SECTION("a flipped byte in a tensor's data names the tensor") {
    std::vector<char> b = good;
    b[rec.data_at + 3] ^= 0x10;
    REQUIRE_ERROR_CONTAINS(parse(b), "rank-00001.bin: tensor 1 of");
    REQUIRE_ERROR_CONTAINS(parse(b), "\"" + rec.name + "\": checksum mismatch");
    write_bytes(rank1, b);
    REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "checksum mismatch");
  }
  SECTION("a corrupted dtype byte is an error, not an abort") {
    std::vector<char> b = good;
    b[rec.dtype_at] = 0x7f;
    REQUIRE_ERROR_CONTAINS(parse(b), "\"" + rec.name + "\": dtype byte 127 is not a known element type");
  }
  SECTION("a corrupted element count never asks for more than the file holds") {
    std::vector<char> b = good;
    const int64_t huge = int64_t{1} << 50;  // 8 PiB of f64
    std::memcpy(b.data() + rec.numel_at, &huge, 8);
    REQUIRE_ERROR_CONTAINS(parse(b), "do not fit in the");
    const int64_t negative = -5;
    std::memcpy(b.data() + rec.numel_at, &negative, 8);
    REQUIRE_ERROR_CONTAINS(parse(b), "-5 f32 elements do not fit");
  }
  SECTION("a corrupted header (tensor count, file size) is caught by its checksum") {
    std::vector<char> b = good;
    b[32] = static_cast<char>(0xff);  // tensor count
    REQUIRE_ERROR_CONTAINS(parse(b), "the header's checksum does not match");
  }
  SECTION("a truncated file names the file") {
    std::vector<char> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() - 7));
    REQUIRE_ERROR_CONTAINS(parse(b), "(truncated)");
    b.resize(20);
    REQUIRE_ERROR_CONTAINS(parse(b), "the file is truncated: the header needs");
  }
  SECTION("another version is refused by number") {
    std::vector<char> b = good;
    b[6] = '0', b[7] = '1';  // the version-1 layout had no checksums
    REQUIRE_ERROR_CONTAINS(parse(b), "unsupported checkpoint shard version 1; this build reads version 2");
    std::string m = manifest_text;
    m.replace(m.find("\"version\": 2"), 12, "\"version\": 1");
    json::write_text_file(manifest, m);
    REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "/version: unsupported checkpoint version 1");
  }
  SECTION("a shard replaced after the commit fails the manifest's hash") {
    std::vector<char> other = read_bytes(fs::path(ckpt) / "rank-00000.bin");
    REQUIRE(other.size() == good.size());
    // Rank 0's file is valid on its own but holds rank 0: the manifest's hash catches it first.
    write_bytes(rank1, other);
    REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "rank-00001.bin: the file's xxh64 is");
  }
  SECTION("the manifest must list one shard per rank of its world size") {
    json::Json doc = json::parse_text(manifest_text, manifest);
    doc["shards"].erase(1);
    json::write_file(manifest, doc);
    REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "/shards: lists 1 shards, world_size is 2");
    doc = json::parse_text(manifest_text, manifest);
    doc["shards"][1]["rank"] = 0;
    json::write_file(manifest, doc);
    REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "/shards/1/rank: rank 0 is listed twice");
    doc = json::parse_text(manifest_text, manifest);
    doc["shards"][0]["file"] = "../rank-00000.bin";
    json::write_file(manifest, doc);
    REQUIRE_ERROR_CONTAINS(make_runtime(s)->load_checkpoint(ckpt), "/shards/0/file: must be a file name inside");
  }
  SECTION("the untouched checkpoint loads") {
    auto back = make_runtime(s);
    back->load_checkpoint(ckpt);
    CHECK(back->steps_done() == 1);
  }
}

TEST_CASE("executor: shards written separately commit into one manifest and a missing shard is refused",
          "[executor][checkpoint]") {
  // What a multi-process run does: each process writes its own shard, one commits.
  TempDir dir("shards");
  const std::vector<std::byte> payload = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  std::vector<checkpoint::ShardInfo> infos;
  for (int r = 0; r < 3; ++r) {
    checkpoint::ShardWriter w(dir.str(), {.rank = r, .world_size = 3, .steps_done = 7, .updates_done = 6});
    w.add("t" + std::to_string(r), DType::i32, 1, payload);
    infos.push_back(w.commit());
  }
  CHECK(fs::is_empty(dir.path) == false);
  for (const auto& e : fs::directory_iterator(dir.path)) CHECK(e.path().extension() != ".tmp");
  // A committer that did not write the shards describes them from disk: same size and hash.
  const checkpoint::ShardInfo again = checkpoint::describe_shard(dir.str(), 2);
  CHECK(again.size_bytes == infos[2].size_bytes);
  CHECK(again.xxh64 == infos[2].xxh64);
  REQUIRE_ERROR_CONTAINS(checkpoint::commit_manifest(dir.str(), json::Json::object(), {infos[0], infos[2]}, 3),
                         "2 shards for a world of 3 ranks");
  CHECK_FALSE(fs::exists(dir.path / "manifest.json"));
  json::Json meta;
  meta["step"] = 7;
  checkpoint::commit_manifest(dir.str(), meta, {infos[2], infos[0], infos[1]}, 3);
  const checkpoint::Manifest m = checkpoint::read_manifest(dir.str());
  CHECK(m.world_size == 3);
  CHECK(m.step == 7);
  for (int r = 0; r < 3; ++r) {
    const checkpoint::Shard sh = checkpoint::read_shard(dir.str(), m.shards[static_cast<size_t>(r)], 3);
    CHECK(sh.header.rank == r);
    CHECK(sh.header.steps_done == 7);
    CHECK(sh.header.updates_done == 6);
    REQUIRE(sh.tensors.size() == 1);
    CHECK(sh.tensors[0].name == "t" + std::to_string(r));
    CHECK(sh.tensors[0].bytes == payload);
  }
  // A world-size mismatch between manifest and shard.
  REQUIRE_ERROR_CONTAINS(checkpoint::read_shard(dir.str(), m.shards[1], 4), "written in a world of 3 ranks");
}
