// Token streams: synthetic, from a file's bytes, and (batch, seq) windows (see data.hpp).
#include "trainplan/executor/data.hpp"


#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/core/random.hpp"

namespace trainplan::executor {

std::vector<int32_t> synthetic_tokens(int64_t count, int64_t vocab, uint64_t seed) {
  if (count < 0 || vocab < 1)
    throw Error(fmt::format("synthetic_tokens: need count >= 0 and vocab >= 1, got {} and {}", count, vocab));
  Rng rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int32_t& t : out) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return out;
}

std::vector<int32_t> read_byte_tokens(const std::string& path) {
  // Refuses directories, unreadable paths and files beyond the input limit with a located error.
  const std::string bytes = json::read_text_file(path);
  if (bytes.empty()) throw Error("the token file is empty").at(path);
  std::vector<int32_t> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<unsigned char>(bytes[i]);
  return out;
}

TokenBatch make_batch(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len, int64_t offset) {
  if (batch < 1 || seq_len < 1 || offset < 0)
    throw Error(fmt::format("make_batch: need batch >= 1, seq_len >= 1, offset >= 0; got {}, {}, {}", batch, seq_len,
                            offset));
  const int64_t needed = offset + batch * seq_len + 1;
  if (static_cast<int64_t>(tokens.size()) < needed)
    throw Error(fmt::format("make_batch: {} tokens, but batch {} x seq {} from offset {} needs {}", tokens.size(), batch,
                            seq_len, offset, needed))
        .hint("use a longer token stream, a smaller batch or a shorter sequence");
  TokenBatch b;
  b.inputs.assign(tokens.begin() + offset, tokens.begin() + offset + batch * seq_len);
  b.targets.assign(tokens.begin() + offset + 1, tokens.begin() + offset + batch * seq_len + 1);
  return b;
}

}  // namespace trainplan::executor
