// File: trainplan/executor/data.hpp
//
// Token streams for training runs of the executor: synthetic (seeded) or read from a file
// (one token per byte, vocabulary 256), cut into (batch, seq) windows with next-token targets.
//
//   std::vector<int32_t> toks = read_byte_tokens("README.md");
//   TokenBatch b = make_batch(toks, /*batch=*/4, /*seq_len=*/32, /*offset=*/0);
//   // b.inputs[i*32 + t] = toks[i*32 + t], b.targets[i*32 + t] = toks[i*32 + t + 1]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace trainplan::executor {

/// `count` tokens uniform in [0, vocab), deterministic for a seed.
std::vector<int32_t> synthetic_tokens(int64_t count, int64_t vocab, uint64_t seed);

/// The bytes of a file as tokens in [0, 256). Error (naming the file) if it cannot be read
/// or is empty.
std::vector<int32_t> read_byte_tokens(const std::string& path);

struct TokenBatch {
  std::vector<int32_t> inputs;   // (batch, seq_len) row-major
  std::vector<int32_t> targets;  // inputs shifted by one token
};

/// `batch` consecutive windows of seq_len tokens starting at `offset`, each target the next
/// token. Needs offset + batch * seq_len + 1 tokens; Error otherwise.
TokenBatch make_batch(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len, int64_t offset);

}  // namespace trainplan::executor
