// File: trainplan/core/random.hpp
//
// Deterministic random numbers. The standard library's distributions differ between
// implementations, so trainplan draws from its own on top of a fixed generator
// (splitmix64-seeded xoshiro256**): the same seed gives the same numbers on every platform.
//
//   Rng rng(42);
//   double u = rng.uniform();            // [0, 1)
//   double t = rng.exponential(1.0/mtbf); // seconds until the next interruption
//   double j = rng.normal(1.0, 0.02);    // a straggler's speed factor
//   Rng child = rng.fork(7);             // an independent stream, e.g. one per Monte Carlo run
#pragma once

#include <cstdint>

namespace trainplan {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  /// 64 random bits.
  uint64_t next();
  /// Uniform in [0, 1) with 53 bits of precision.
  double uniform();
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n);
  /// Exponential with the given rate (mean 1/rate).
  double exponential(double rate);
  /// Normal (Box-Muller, no cached second value so the stream position is predictable).
  double normal(double mean, double stddev);
  /// A new generator whose stream depends on this one's seed and `stream` only.
  Rng fork(uint64_t stream) const;

 private:
  uint64_t seed_;
  uint64_t s_[4];
};

}  // namespace trainplan
