// libFuzzer target: checkpoint shard files (executor/checkpoint): any bytes must give a
// parsed shard or an Error, never a crash or an allocation beyond the input's size. The header
// carries its own checksum, which random mutations almost never keep right: for inputs whose
// first byte is odd the harness rewrites the header's file size and checksum, so the fuzzer
// also reaches the tensor records behind a valid header.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "trainplan/core/error.hpp"
#include "trainplan/executor/checkpoint.hpp"

using namespace trainplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), reinterpret_cast<const std::byte*>(data + size));
  constexpr size_t kHeader = 48;
  if ((data[0] & 1) && bytes.size() >= kHeader + 8) {
    const uint64_t file_size = bytes.size();
    std::memcpy(bytes.data() + 40, &file_size, 8);
    const uint64_t h = XXH64(bytes.data(), kHeader, 0);
    std::memcpy(bytes.data() + kHeader, &h, 8);
  }
  size = bytes.size();
  try {
    const auto shard = executor::checkpoint::parse_shard(bytes, "rank-00000.bin");
    size_t total = 0;
    for (const auto& t : shard.tensors) total += t.bytes.size();
    if (total > size) __builtin_trap();  // more tensor bytes than input: a size check is missing
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
