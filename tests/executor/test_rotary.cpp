// The rotary kernel (RoPE, half-split form) against the formula written out per element, and
// its backward (the inverse rotation) against the adjoint identity <R x, y> = <x, R^T y>.
#include <cmath>

#include "executor_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

TEST_CASE("executor: rotary rotates dims j and j + D/2 of Q and K by pos * theta^(-2j/D), copies V",
          "[executor][kernels]") {
  Device dev;
  Rng rng(17);
  const AttentionShape sh{2, 5, 4, 2, 6, true};  // B, T, H, KVH, D
  const int64_t rows = sh.tokens(), cols = sh.qkv_cols();
  const double theta = 10000;
  const std::vector<double> x = random_values(rng, static_cast<size_t>(rows * cols));
  Tensor in = dev.put({rows, cols}, x), out = dev.zeros({rows, cols});
  dev->rotary(dev.stream, out, in, sh, theta, false);
  const std::vector<double> got = dev.get(out);
  const int64_t D = sh.head_dim, half = D / 2;
  for (int64_t n = 0; n < rows; ++n) {
    const double pos = static_cast<double>(n % sh.seq);
    for (int64_t h = 0; h < sh.heads + 2 * sh.kv_heads; ++h)
      for (int64_t j = 0; j < D; ++j) {
        const size_t i = static_cast<size_t>(n * cols + h * D + j);
        double want = x[i];
        if (h < sh.heads + sh.kv_heads) {  // Q and K heads rotate, V heads do not
          const int64_t p = j % half;
          const double angle = pos * std::pow(theta, -2.0 * static_cast<double>(p) / static_cast<double>(D));
          const double a = x[static_cast<size_t>(n * cols + h * D + p)], b = x[static_cast<size_t>(n * cols + h * D + p + half)];
          want = j < half ? a * std::cos(angle) - b * std::sin(angle) : b * std::cos(angle) + a * std::sin(angle);
        }
        INFO("row " << n << " head " << h << " dim " << j);
        CHECK(got[i] == Approx(want).margin(1e-12));
      }
  }
  // In place gives the same result.
  Tensor same = dev.put({rows, cols}, x);
  dev->rotary(dev.stream, same, same, sh, theta, false);
  CHECK(dev.get(same) == got);
}

TEST_CASE("executor: rotary backward is the inverse rotation, the adjoint of the forward", "[executor][kernels]") {
  Device dev;
  Rng rng(23);
  const AttentionShape sh{3, 7, 2, 1, 8, true};
  const int64_t rows = sh.tokens(), cols = sh.qkv_cols();
  const std::vector<double> x = random_values(rng, static_cast<size_t>(rows * cols));
  const std::vector<double> y = random_values(rng, static_cast<size_t>(rows * cols));
  Tensor tx = dev.put({rows, cols}, x), ty = dev.put({rows, cols}, y);
  Tensor rx = dev.zeros({rows, cols}), ry = dev.zeros({rows, cols}), back = dev.zeros({rows, cols});
  dev->rotary(dev.stream, rx, tx, sh, 500000, false);
  dev->rotary(dev.stream, ry, ty, sh, 500000, true);
  CHECK(dot(dev.get(rx), y) == Approx(dot(x, dev.get(ry))).epsilon(1e-12));
  dev->rotary(dev.stream, back, rx, sh, 500000, true);
  const std::vector<double> round_trip = dev.get(back);
  for (size_t i = 0; i < x.size(); ++i) CHECK(round_trip[i] == Approx(x[i]).margin(1e-12));
}

TEST_CASE("executor: rotary rejects an odd head size and mismatched shapes", "[executor][kernels]") {
  Device dev;
  const AttentionShape odd{1, 2, 2, 2, 3, true};
  Tensor t = dev.zeros({2, odd.qkv_cols()});
  REQUIRE_ERROR_CONTAINS(dev->rotary(dev.stream, t, t, odd, 10000, false), "head_dim must be even");
  const AttentionShape sh{1, 2, 2, 2, 4, true};
  Tensor wrong = dev.zeros({2, 10});
  REQUIRE_ERROR_CONTAINS(dev->rotary(dev.stream, wrong, wrong, sh, 10000, false), "rotary: inp has shape (2,10)");
}
