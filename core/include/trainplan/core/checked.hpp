// File: trainplan/core/checked.hpp
//
// Numbers from users, read once and checked: every integer or real that comes from a JSON
// file, a command-line flag or a unit string goes through these helpers, so no value wraps,
// overflows to inf, turns into NaN or reaches a float->int conversion out of range.
//
//   int64_t gpus = checked::parse_int("1e6", 1, limits::kMaxGpus);   // error: must be at most 65536 ...
//   int tp = checked::narrow<int>(reader_value, 1, limits::kMaxGpus); // no silent wrap
//   int64_t steps = checked::to_int(tokens / tokens_per_step, 1, limits::kMaxSteps, "steps");
//
// Errors are trainplan::Error without a location; the caller adds the file and pointer (or
// the flag) with Error::at.
//
// The limits below are far beyond any real training job; they exist so that a typo such as
// `--max-gpus 1e6` or `"layers": 1000000` gets a clear error instead of hours of work or an
// exhausted memory. They are listed in core/README.md and in `--help`.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "trainplan/core/error.hpp"

namespace trainplan::limits {

/// Nesting depth of any JSON document (objects and arrays). Our formats need fewer than 10.
inline constexpr int kMaxJsonDepth = 128;
/// Bytes of one input file (JSON, trace, text data): refused beyond, so /dev/zero or a wrong
/// path cannot exhaust memory.
inline constexpr int64_t kMaxInputFileBytes = int64_t{4} << 30;  // 4 GiB
/// Largest integer any JSON field or flag takes unless a field says otherwise (2^31 - 1):
/// every count in trainplan fits an `int`.
inline constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
/// GPUs in one plan or search (the largest published runs use about 16k-100k GPUs).
inline constexpr int64_t kMaxGpus = 131072;
/// GPUs in one instance (catalog entries have 1 to 16; a rack-scale NVL72 has 72).
inline constexpr int64_t kMaxGpusPerInstance = 1024;
/// Instances in one plan or search.
inline constexpr int64_t kMaxInstances = 131072;
/// Transformer blocks (the deepest published models have about 1000).
inline constexpr int64_t kMaxLayers = 10000;
/// Hidden size, FFN width, heads, vocabulary, sequence length, image size.
inline constexpr int64_t kMaxWidth = 1 << 22;            // 4,194,304
inline constexpr int64_t kMaxSeqLen = 1 << 24;           // 16,777,216 tokens
inline constexpr int64_t kMaxVocab = 1 << 24;
/// Sequences in one global batch, and in one micro-batch.
inline constexpr int64_t kMaxBatch = 1 << 24;
/// Worker threads of any parallel stage.
inline constexpr int64_t kMaxThreads = 1024;
/// Monte Carlo runs of a whole-job estimate.
inline constexpr int64_t kMaxRuns = 1000000;
/// Candidates simulated, rows printed.
inline constexpr int64_t kMaxRows = 1000000;
/// Optimizer steps of one job (a trillion).
inline constexpr int64_t kMaxSteps = 1000000000000;
/// Work of one job in seconds (about 31.7 years), and checkpoints in it.
inline constexpr double kMaxJobSeconds = 1e9;
inline constexpr int64_t kMaxCheckpoints = 10000000;
/// Training tokens (a quadrillion: about 30 times the largest published runs).
inline constexpr double kMaxTokens = 1e18;
/// Money in US dollars, and prices per instance-hour.
inline constexpr double kMaxUsd = 1e15;
inline constexpr double kMaxUsdPerHour = 1e6;
/// Durations in seconds (about 3,170 years).
inline constexpr double kMaxSeconds = 1e11;
/// Sizes in bytes (an exabyte) and bandwidths in bytes per second.
inline constexpr double kMaxBytes = 1e18;
inline constexpr double kMaxBytesPerSecond = 1e18;
/// FLOP per second of one device.
inline constexpr double kMaxFlopsRate = 1e21;

}  // namespace trainplan::limits

namespace trainplan::checked {

/// Parses a whole number: optional sign, digits, optionally an exponent ("1e6") or a count
/// suffix k, M, B, T; the result must be a whole number in [min, max]. "-1" is refused when
/// min >= 0, with the range in the message.
int64_t parse_int(std::string_view text, int64_t min, int64_t max);

/// Parses a finite real number in [min, max] (no unit).
double parse_real(std::string_view text, double min, double max);

/// Checks that `value` is finite and in [min, max]; returns it.
double in_range(double value, double min, double max);

/// Checks that `value` is in [min, max]; returns it.
int64_t in_range(int64_t value, int64_t min, int64_t max);

/// Converts a computed real (e.g. tokens / tokens per step) to an integer: it must be finite
/// and in [min, max] after rounding up when `ceil` is true (else truncation). `what` names
/// the quantity in the error ("steps"); `inputs` names the flags or fields it is computed
/// from, for the hint (empty: a generic hint).
int64_t to_int(double value, int64_t min, int64_t max, std::string_view what, bool ceil = false,
               std::string_view inputs = {});

/// `value` as T, refusing values outside [min, max] (which must lie within T's range).
template <typename T>
T narrow(int64_t value, int64_t min = std::numeric_limits<T>::min(), int64_t max = std::numeric_limits<T>::max()) {
  return static_cast<T>(in_range(value, min, max));
}

/// a * b for counts (dp * tp * pp, micro_batch * dp ...), refusing a product above `max`.
int64_t multiply(int64_t a, int64_t b, int64_t max, std::string_view what);

/// "between 1 and 65,536" / "at least 1" / "at most 10": the range as a message part.
std::string range_text(int64_t min, int64_t max);
std::string range_text(double min, double max);

}  // namespace trainplan::checked
