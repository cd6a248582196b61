#include <atomic>
#include <numeric>
#include <stdexcept>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/thread_pool.hpp"

using namespace trainplan;

TEST_CASE("thread pool: results do not depend on the thread count", "[core]") {
  const size_t n = 10007;
  auto run = [&](size_t threads) {
    ThreadPool pool(threads);
    std::vector<uint64_t> out(n);
    pool.parallel_for(n, [&](size_t i) { out[i] = Rng(i).next(); });
    return out;
  };
  auto one = run(1);
  CHECK(run(2) == one);
  CHECK(run(5) == one);
}

TEST_CASE("thread pool: an exception in a task reaches the caller", "[core]") {
  ThreadPool pool(3);
  CHECK_THROWS_AS(pool.parallel_for(100, [](size_t i) { if (i == 57) throw std::runtime_error("boom"); }),
                  std::runtime_error);
  // The pool is still usable afterwards.
  std::atomic<size_t> sum{0};
  pool.parallel_for(100, [&](size_t i) { sum += i; });
  CHECK(sum == 4950);
}

TEST_CASE("thread pool: cancellation skips the remaining work", "[core]") {
  ThreadPool pool(2);
  std::atomic<bool> cancel{false};
  std::atomic<size_t> ran{0};
  pool.parallel_for(100000, [&](size_t i) { ++ran; if (i == 10) cancel = true; }, &cancel);
  CHECK(ran < 100000);
}

TEST_CASE("random: same seed same stream, exponential has the right mean", "[core]") {
  Rng a(42), b(42);
  for (int i = 0; i < 10; ++i) CHECK(a.next() == b.next());
  Rng r(7);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) sum += r.exponential(0.5);
  CHECK(sum / n == Approx(2.0).epsilon(0.02));
  Rng f1 = Rng(1).fork(3), f2 = Rng(1).fork(3), f3 = Rng(1).fork(4);
  CHECK(f1.next() == f2.next());
  CHECK(f1.next() != f3.next());
}

TEST_CASE("strings: closest name by edit distance", "[core]") {
  std::vector<std::string> names = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "g4dn.12xlarge"};
  CHECK(closest("p4d.24xlarg", names) == "p4d.24xlarge");
  CHECK(closest("p5.48xl", names) == "p5.48xlarge");
  CHECK(closest("banana", names).empty());
  CHECK(split(" a, b ,,c ", ',') == std::vector<std::string>{"a", "b", "c"});
}
