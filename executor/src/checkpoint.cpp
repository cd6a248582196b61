// Checkpoint shard files and the manifest (layout in checkpoint.hpp): streamed writes with
// XXH64 per tensor and per file, atomic commits, and loads that check every size against the
// bytes actually present before allocating anything.
#include "trainplan/executor/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"

namespace trainplan::executor::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[6] = {'T', 'P', 'C', 'K', 'P', 'T'};
constexpr size_t kHeaderBytes = 48;
constexpr const char* kHint = "the file was damaged or not written completely; resume from another checkpoint";

template <class T>
void store(std::byte* out, T v) {
  std::memcpy(out, &v, sizeof(T));
}

std::string system_error(const std::string& what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: the rename is already durable on most file systems
  ::fsync(fd);
  ::close(fd);
}

// Writes `text` to path.tmp, fsyncs it and renames it over path.
void write_atomically(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(system_error("cannot create the file")).at(tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const Error e = Error(system_error("writing failed")).at(tmp).hint("is the disk full?");
      ::close(fd);
      ::unlink(tmp.c_str());
      throw e;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(system_error("flushing failed")).at(tmp).hint("is the disk full?");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(system_error("cannot rename the file into place")).at(path);
  }
  fsync_dir(fs::path(path).parent_path().string());
}

// Reads little-endian fields from a byte span; every read is bounds-checked.
class Cursor {
 public:
  Cursor(std::span<const std::byte> data, const std::string& path) : data_(data), path_(path) {}
  size_t offset() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }
  template <class T>
  T get(const char* what) {
    T v{};
    need(sizeof(T), what);
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> take(size_t n, const char* what) {
    need(n, what);
    auto s = data_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw Error(fmt::format("{} (at byte {})", message, pos_)).at(path_).hint(kHint);
  }

 private:
  void need(size_t n, const char* what) const {
    if (n > remaining())
      throw Error(fmt::format("the file is truncated: {} needs {} bytes at byte {}, the file has {} left", what, n, pos_,
                              remaining()))
          .at(path_)
          .hint(kHint);
  }
  std::span<const std::byte> data_;
  const std::string& path_;
  size_t pos_ = 0;
};

std::vector<std::byte> read_file_bytes(const std::string& path, uint64_t expected_size) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw Error("cannot read the checkpoint shard: " + ec.message()).at(path).hint("is the checkpoint complete?");
  if (size != expected_size)
    throw Error(fmt::format("the file has {} bytes, the manifest says {}{}", size, expected_size,
                            size < expected_size ? " (truncated)" : ""))
        .at(path)
        .hint(kHint);
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in || static_cast<uint64_t>(in.gcount()) != size) throw Error("cannot read the checkpoint shard").at(path);
  return bytes;
}

}  // namespace

std::string shard_file_name(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

std::string hash_hex(uint64_t h) { return fmt::format("{:016x}", h); }

// ---- writing ------------------------------------------------------------------------------------

ShardWriter::ShardWriter(const std::string& dir, const ShardHeader& header)
    : path_((fs::path(dir) / shard_file_name(header.rank)).string()), tmp_(path_ + ".tmp"), header_(header) {
  TP_ASSERT(header.rank >= 0 && header.rank < header.world_size);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(system_error("cannot create the checkpoint shard")).at(tmp_);
  const std::byte zeros[kHeaderBytes + sizeof(uint64_t)] = {};
  write(zeros, sizeof(zeros));  // the header goes here at commit()
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void ShardWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(system_error("writing the checkpoint shard failed")).at(tmp_).hint("is the disk full?");
    p += w;
    n -= static_cast<size_t>(w);
    size_ += static_cast<uint64_t>(w);
  }
}

void ShardWriter::add(const std::string& name, DType dtype, int64_t numel, std::span<const std::byte> bytes) {
  TP_ASSERT_MSG(fd_ >= 0, "ShardWriter::add after commit");
  TP_ASSERT(name.size() <= kMaxNameBytes && numel >= 0);
  TP_ASSERT(bytes.size() == static_cast<size_t>(numel) * dtype_size_bytes(dtype));
  std::byte head[sizeof(uint32_t)];
  store<uint32_t>(head, static_cast<uint32_t>(name.size()));
  std::byte meta[1 + sizeof(int64_t)];
  meta[0] = static_cast<std::byte>(dtype);
  store<int64_t>(meta + 1, numel);
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  XXH64_update(st, head, sizeof(head));
  XXH64_update(st, name.data(), name.size());
  XXH64_update(st, meta, sizeof(meta));
  XXH64_update(st, bytes.data(), bytes.size());
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  write(head, sizeof(head));
  write(name.data(), name.size());
  write(meta, sizeof(meta));
  write(bytes.data(), bytes.size());
  write(&h, sizeof(h));
  ++count_;
}

ShardInfo ShardWriter::commit() {
  TP_ASSERT_MSG(fd_ >= 0, "ShardWriter::commit twice");
  std::byte header[kHeaderBytes + sizeof(uint64_t)] = {};
  std::memcpy(header, kMagic, sizeof(kMagic));
  const std::string version = fmt::format("{:02d}", kVersion);
  std::memcpy(header + 6, version.data(), 2);
  store<uint32_t>(header + 8, static_cast<uint32_t>(header_.rank));
  store<uint32_t>(header + 12, static_cast<uint32_t>(header_.world_size));
  store<int64_t>(header + 16, header_.steps_done);
  store<int64_t>(header + 24, header_.updates_done);
  store<uint32_t>(header + 32, count_);
  store<uint32_t>(header + 36, 0);
  store<uint64_t>(header + 40, size_);
  store<uint64_t>(header + kHeaderBytes, XXH64(header, kHeaderBytes, 0));
  if (::pwrite(fd_, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)) || ::fsync(fd_) != 0)
    throw Error(system_error("writing the checkpoint shard failed")).at(tmp_).hint("is the disk full?");
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw Error(system_error("writing the checkpoint shard failed")).at(tmp_).hint("is the disk full?");
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    ::unlink(tmp_.c_str());
    throw Error(system_error("cannot rename the checkpoint shard into place")).at(path_);
  }
  fsync_dir(fs::path(path_).parent_path().string());
  return describe_shard(fs::path(path_).parent_path().string(), header_.rank);
}

ShardInfo describe_shard(const std::string& dir, int rank) {
  ShardInfo info;
  info.rank = rank;
  info.file = shard_file_name(rank);
  const std::string path = (fs::path(dir) / info.file).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open the checkpoint shard").at(path).hint("every rank writes its shard before the commit");
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n <= 0) break;
    XXH64_update(st, buf.data(), static_cast<size_t>(n));
    info.size_bytes += static_cast<uint64_t>(n);
  }
  info.xxh64 = XXH64_digest(st);
  XXH64_freeState(st);
  return info;
}

void commit_manifest(const std::string& dir, json::Json meta, std::vector<ShardInfo> shards, int world_size) {
  TP_ASSERT(world_size >= 1);
  std::sort(shards.begin(), shards.end(), [](const ShardInfo& a, const ShardInfo& b) { return a.rank < b.rank; });
  if (shards.size() != static_cast<size_t>(world_size))
    throw Error(fmt::format("the checkpoint has {} shards for a world of {} ranks", shards.size(), world_size))
        .at(dir)
        .hint("every rank writes its shard before the manifest is committed");
  for (size_t i = 0; i < shards.size(); ++i)
    if (shards[i].rank != static_cast<int>(i))
      throw Error(fmt::format("the checkpoint has no shard of rank {}", i)).at(dir).hint("every rank writes its shard");
  json::Json doc;
  doc["format"] = kManifestFormat;
  doc["version"] = kVersion;
  doc["world_size"] = world_size;
  for (auto& [key, value] : meta.items()) doc[key] = value;
  json::Json list = json::Json::array();
  for (const ShardInfo& s : shards) {
    json::Json j;
    j["rank"] = s.rank;
    j["file"] = s.file;
    j["size_bytes"] = s.size_bytes;
    j["xxh64"] = hash_hex(s.xxh64);
    list.push_back(std::move(j));
  }
  doc["shards"] = std::move(list);
  write_atomically((fs::path(dir) / kManifestName).string(), doc.dump(2) + "\n");
}

// ---- reading ------------------------------------------------------------------------------------

Manifest read_manifest(const std::string& dir) {
  Manifest m;
  m.path = (fs::path(dir) / kManifestName).string();
  if (!fs::is_regular_file(m.path))
    throw Error("no checkpoint here: manifest.json is missing").at(dir).hint("pass a folder written by save_checkpoint");
  m.doc = json::parse_file(m.path);
  json::Reader r(m.doc, m.path);
  if (r.field("format").as_string() != kManifestFormat) throw r.field("format").error("not a trainplan checkpoint manifest");
  const int64_t version = r.field("version").as_int();
  if (version != kVersion)
    throw r.field("version")
        .error(fmt::format("unsupported checkpoint version {}; this build reads version {}", version, kVersion))
        .hint(version < kVersion ? "the checkpoint was written by an older trainplan (before per-tensor checksums); "
                                   "start a new run or load it with that version"
                                 : "the checkpoint was written by a newer trainplan");
  const int64_t world = r.field("world_size").as_positive_int();
  if (world > (int64_t{1} << 20)) throw r.field("world_size").error(fmt::format("world size {} is not plausible", world));
  m.world_size = static_cast<int>(world);
  m.step = r.field("step").as_nonnegative_int();
  const json::Reader list = r.field("shards");
  if (!list.is_array())
    throw list.error("must be an array of shards").hint("the manifest is damaged: resume from another checkpoint, or start without --resume");
  if (list.size() != static_cast<size_t>(world))
    throw list.error(fmt::format("lists {} shards, world_size is {}", list.size(), world))
        .hint("the manifest lists one shard per rank");
  m.shards.resize(static_cast<size_t>(world));
  std::vector<bool> seen(static_cast<size_t>(world), false);
  for (const json::Reader& s : list.items()) {
    const int64_t rank = s.field("rank").as_nonnegative_int();
    if (rank >= world) throw s.field("rank").error(fmt::format("rank {} is outside the world of {}", rank, world));
    if (seen[static_cast<size_t>(rank)]) throw s.field("rank").error(fmt::format("rank {} is listed twice", rank));
    seen[static_cast<size_t>(rank)] = true;
    ShardInfo& info = m.shards[static_cast<size_t>(rank)];
    info.rank = static_cast<int>(rank);
    info.file = s.field("file").as_string();
    if (info.file.empty() || info.file.find('/') != std::string::npos || info.file == "." || info.file == "..")
      throw s.field("file").error("must be a file name inside the checkpoint folder");
    const double size = s.field("size_bytes").as_nonnegative();
    if (size > 9e15 || size != static_cast<double>(static_cast<uint64_t>(size)))
      throw s.field("size_bytes").error("must be a whole number of bytes");
    info.size_bytes = static_cast<uint64_t>(size);
    const std::string hex = s.field("xxh64").as_string();
    if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw s.field("xxh64").error(fmt::format("must be 16 lower-case hex digits, got \"{}\"", hex));
    info.xxh64 = std::stoull(hex, nullptr, 16);
    s.finish();
  }
  return m;
}

Shard read_shard(const std::string& dir, const ShardInfo& info, int world_size) {
  const std::string path = (fs::path(dir) / info.file).string();
  const std::vector<std::byte> bytes = read_file_bytes(path, info.size_bytes);
  Shard s = parse_shard(bytes, path);
  const uint64_t h = XXH64(bytes.data(), bytes.size(), 0);
  if (h != info.xxh64)
    throw Error(fmt::format("the file's xxh64 is {}, the manifest says {}", hash_hex(h), hash_hex(info.xxh64)))
        .at(path)
        .hint("the shard was replaced after the manifest was committed; resume from another checkpoint");
  if (s.header.rank != info.rank)
    throw Error(fmt::format("the file holds rank {}, the manifest lists it for rank {}", s.header.rank, info.rank)).at(path);
  if (s.header.world_size != world_size)
    throw Error(fmt::format("the file was written in a world of {} ranks, the manifest says {}", s.header.world_size,
                            world_size))
        .at(path);
  return s;
}

Shard parse_shard(std::span<const std::byte> data, const std::string& path) {
  Cursor c(data, path);
  auto magic = c.take(8, "the header");
  if (std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0)
    throw Error("not a trainplan checkpoint shard (bad magic)").at(path).hint("pass a folder written by save_checkpoint");
  const char v0 = static_cast<char>(magic[6]), v1 = static_cast<char>(magic[7]);
  if (v0 < '0' || v0 > '9' || v1 < '0' || v1 > '9')
    throw Error("not a trainplan checkpoint shard (bad version field)").at(path).hint(kHint);
  const int version = (v0 - '0') * 10 + (v1 - '0');
  if (version != kVersion)
    throw Error(fmt::format("unsupported checkpoint shard version {}; this build reads version {}", version, kVersion))
        .at(path)
        .hint(version < kVersion ? "written by an older trainplan (before per-tensor checksums); start a new run"
                                 : "written by a newer trainplan");
  Shard s;
  const auto rank = c.get<uint32_t>("the header");
  const auto world = c.get<uint32_t>("the header");
  s.header.steps_done = c.get<int64_t>("the header");
  s.header.updates_done = c.get<int64_t>("the header");
  const auto count = c.get<uint32_t>("the header");
  c.get<uint32_t>("the header");
  const auto file_size = c.get<uint64_t>("the header");
  const auto header_hash = c.get<uint64_t>("the header checksum");
  if (XXH64(data.data(), kHeaderBytes, 0) != header_hash)
    throw Error("the header's checksum does not match (the header is corrupted)").at(path).hint(kHint);
  if (file_size != data.size())
    throw Error(fmt::format("the file has {} bytes, its header says {}{}", data.size(), file_size,
                            data.size() < file_size ? " (truncated)" : ""))
        .at(path)
        .hint(kHint);
  if (world == 0 || rank >= world || world > (1u << 20) || s.header.steps_done < 0 || s.header.updates_done < 0 ||
      s.header.updates_done > s.header.steps_done)
    c.fail(fmt::format("implausible header (rank {}, world {}, steps {}, updates {})", rank, world, s.header.steps_done,
                       s.header.updates_done));
  s.header.rank = static_cast<int>(rank);
  s.header.world_size = static_cast<int>(world);
  // Each tensor record takes at least 21 bytes: a count beyond that is corrupt, whatever it asks.
  constexpr size_t kMinRecord = sizeof(uint32_t) + 1 + sizeof(int64_t) + sizeof(uint64_t);
  if (count > c.remaining() / kMinRecord)
    c.fail(fmt::format("the header lists {} tensors, the file has room for at most {}", count, c.remaining() / kMinRecord));
  s.tensors.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t record_begin = c.offset();
    const std::string where = fmt::format("tensor {} of {}", i + 1, count);
    const auto len = c.get<uint32_t>("a tensor name length");
    if (len > kMaxNameBytes) c.fail(fmt::format("{}: name length {} is corrupt (at most {})", where, len, kMaxNameBytes));
    auto name_bytes = c.take(len, "a tensor name");
    TensorRecord t;
    t.name.assign(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
    const std::string label = fmt::format("{} \"{}\"", where, t.name);
    const auto code = c.get<uint8_t>("a tensor dtype");
    const auto dtype = dtype_from_code(code);
    if (!dtype) c.fail(fmt::format("{}: dtype byte {} is not a known element type (corrupted)", label, code));
    t.dtype = *dtype;
    t.numel = c.get<int64_t>("a tensor element count");
    const size_t elem = dtype_size_bytes(t.dtype);
    if (t.numel < 0 || static_cast<uint64_t>(t.numel) > (c.remaining() - std::min(c.remaining(), sizeof(uint64_t))) / elem)
      c.fail(fmt::format("{}: {} {} elements do not fit in the {} bytes left in the file (corrupted size)", label, t.numel,
                         dtype_name(t.dtype), c.remaining()));
    auto payload = c.take(static_cast<size_t>(t.numel) * elem, "tensor data");
    const uint64_t want = XXH64(data.data() + record_begin, c.offset() - record_begin, 0);
    const auto got = c.get<uint64_t>("a tensor checksum");
    if (got != want)
      throw Error(fmt::format("{}: checksum mismatch (stored {}, computed {}): the tensor's bytes are corrupted", label,
                              hash_hex(got), hash_hex(want)))
          .at(path)
          .hint(kHint);
    t.bytes.assign(payload.begin(), payload.end());
    s.tensors.push_back(std::move(t));
  }
  if (c.remaining() != 0) c.fail(fmt::format("{} bytes after the last tensor", c.remaining()));
  return s;
}

}  // namespace trainplan::executor::checkpoint
