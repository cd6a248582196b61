// Checkpoint files: one shard file per rank and a manifest committed last.
//
// A checkpoint is a folder. Every rank (thread or process) writes its own shard file with
// write_shard(); once all shards exist, one writer commits `manifest.json` with
// commit_manifest() (temporary file + fsync + rename + fsync of the folder), so a folder with
// a manifest always holds a whole checkpoint and a crash or SIGTERM before the commit leaves
// none. Loading reads the manifest (read_manifest: format, version, world size, one shard per
// rank with its size and xxHash64) and each shard (read_shard: the manifest's size and hash,
// then every tensor's own checksum), so a flipped byte, a truncated file, a corrupted dtype or
// size field, or a file of another version is an Error naming the file and the tensor, and no
// size read from a file is allocated before it is checked against the file's length.
//
//   ShardWriter w(dir, {.rank = r, .world_size = n, .steps_done = 10, .updates_done = 10});
//   w.add("fc1.weight:value", DType::f32, numel, bytes);
//   ShardInfo info = w.commit();                // dir/rank-0000r.bin, fsynced
//   ... gather every rank's ShardInfo (or describe_shard(dir, r) from the files) ...
//   commit_manifest(dir, meta, infos);          // dir/manifest.json, atomically
//   Manifest m = read_manifest(dir);            // verified
//   Shard s = read_shard(dir, m.shards[r]);     // verified
//
// Shard file layout (version 2), little-endian:
//   header (48 bytes): char[8] "TPCKPT02", u32 rank, u32 world size, i64 steps done,
//     i64 optimizer updates done, u32 tensor count, u32 zero, u64 file size in bytes;
//   u64 XXH64 (seed 0) of the header;
//   per tensor: u32 name length, name, u8 dtype, i64 element count, the raw elements, then
//     u64 XXH64 of the record (name length through the last element byte).
// The manifest lists, per shard, the rank, file name, size in bytes and the XXH64 of the
// whole file (16 hex digits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/executor/tensor.hpp"

namespace trainplan::executor::checkpoint {

inline constexpr int kVersion = 2;
inline constexpr const char* kManifestFormat = "trainplan-checkpoint";
inline constexpr const char* kManifestName = "manifest.json";
/// Longest tensor name a shard may hold (a longer one is a corrupted file).
inline constexpr uint32_t kMaxNameBytes = 4096;

/// The file name of rank r's shard: "rank-<r, 5 digits>.bin".
std::string shard_file_name(int rank);

struct ShardHeader {
  int rank = 0;
  int world_size = 1;
  int64_t steps_done = 0;    // training steps taken (the data position)
  int64_t updates_done = 0;  // optimizer updates applied (skipped non-finite steps excluded)
};

/// One shard as the manifest lists it.
struct ShardInfo {
  int rank = 0;
  std::string file;          // name inside the checkpoint folder
  uint64_t size_bytes = 0;
  uint64_t xxh64 = 0;        // of the whole file
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::f32;
  int64_t numel = 0;
  std::vector<std::byte> bytes;  // numel * dtype_size_bytes(dtype) raw little-endian elements
};

struct Shard {
  ShardHeader header;
  std::vector<TensorRecord> tensors;
};

/// Streams one shard file: tensors go to `<dir>/<shard file>.tmp` as they are added; commit()
/// writes the header, fsyncs and renames the file into place. Destroying an uncommitted writer
/// removes the temporary file.
class ShardWriter {
 public:
  ShardWriter(const std::string& dir, const ShardHeader& header);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  /// Appends one tensor; bytes.size() must be numel * dtype_size_bytes(dtype).
  void add(const std::string& name, DType dtype, int64_t numel, std::span<const std::byte> bytes);
  ShardInfo commit();

 private:
  void write(const void* data, size_t n);
  std::string path_, tmp_;
  ShardHeader header_;
  int fd_ = -1;
  uint32_t count_ = 0;
  uint64_t size_ = 0;
};

/// Size and XXH64 of a shard already on disk (for a committer that did not write it).
ShardInfo describe_shard(const std::string& dir, int rank);

/// Writes `<dir>/manifest.json` atomically: `meta`'s fields (model, layout, step, ...) plus
/// format, version, world_size and the shard list (sorted by rank). Refuses a list that does not
/// hold exactly one shard per rank 0..world_size-1.
void commit_manifest(const std::string& dir, json::Json meta, std::vector<ShardInfo> shards, int world_size);

struct Manifest {
  std::string path;
  json::Json doc;                 // the whole manifest (for model / layout checks)
  int world_size = 0;
  int64_t step = 0;
  std::vector<ShardInfo> shards;  // index = rank
};

/// Reads and checks `<dir>/manifest.json`: format, version, world size, exactly one shard per
/// rank with a file name inside the folder, its size and hash.
Manifest read_manifest(const std::string& dir);

/// Reads `<dir>/<info.file>` and checks it against `info` (size, hash) and `world_size`, then
/// parses it.
Shard read_shard(const std::string& dir, const ShardInfo& info, int world_size);

/// Parses a shard file's bytes (`path` names it in errors); checks the header and every
/// tensor's checksum. Never allocates more than data.size() bytes for tensors.
Shard parse_shard(std::span<const std::byte> data, const std::string& path);

/// XXH64 (seed 0) as 16 lower-case hex digits.
std::string hash_hex(uint64_t h);

}  // namespace trainplan::executor::checkpoint
