// Automated partitioning of layer units over pipeline stages. See partition.hpp for the method.
#include "trainplan/planner/partition.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>

#include "trainplan/core/error.hpp"
#include "trainplan/planner/analytical.hpp"

namespace trainplan::planner {

std::string_view balance_name(Balance b) { return b == Balance::memory ? "memory" : "time"; }

double Partition::max_time_s() const {
  return rank_time_s.empty() ? 0.0 : *std::max_element(rank_time_s.begin(), rank_time_s.end());
}
double Partition::max_memory_bytes() const {
  return rank_memory_bytes.empty() ? 0.0 : *std::max_element(rank_memory_bytes.begin(), rank_memory_bytes.end());
}

namespace {

constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// The memory formula of PartitionProblem, in one place so that every caller rounds alike.
// kept = K; rise = max over the rank's units of (kept through u + excursion[u]).
double rank_bytes(const PartitionProblem& p, int rank, double static_sum, double kept, double rise, double peaks,
                  bool owns_last, bool owns_first) {
  const size_t r = static_cast<size_t>(rank);
  double m = p.fixed_bytes[r] + static_sum + (p.in_flight[r] - 1.0) * kept + std::max(kept, rise) + peaks;
  if (owns_last) m += p.last_bytes + (owns_first ? 0.0 : p.last_without_first_bytes);
  return m;
}

// Prefix sums and per-range costs of one problem.
class Costs {
 public:
  explicit Costs(const PartitionProblem& p) : p_(p), n_(p.num_units()) {
    time_.assign(static_cast<size_t>(n_) + 1, 0.0);
    static_.assign(static_cast<size_t>(n_) + 1, 0.0);
    kept_.assign(static_cast<size_t>(n_) + 1, 0.0);
    rise_.assign(static_cast<size_t>(n_), 0.0);
    for (int u = 0; u < n_; ++u) {
      const size_t i = static_cast<size_t>(u);
      time_[i + 1] = time_[i] + p.unit_time_s[i];
      static_[i + 1] = static_[i] + p.static_bytes[i];
      kept_[i + 1] = kept_[i] + p.kept_bytes[i];
      rise_[i] = kept_[i + 1] + p.excursion_bytes[i];
    }
  }
  int n() const { return n_; }
  const PartitionProblem& problem() const { return p_; }
  // Units [i, e).
  double time(int i, int e) const { return time_[static_cast<size_t>(e)] - time_[static_cast<size_t>(i)]; }
  double static_bytes(int i, int e) const { return static_[static_cast<size_t>(e)] - static_[static_cast<size_t>(i)]; }
  double kept(int i, int e) const { return kept_[static_cast<size_t>(e)] - kept_[static_cast<size_t>(i)]; }
  // Global-prefix form of the rise: rise_at(u) - kept_prefix(i) = kept of [i, u] + excursion[u].
  double rise_at(int u) const { return rise_[static_cast<size_t>(u)]; }
  double kept_prefix(int i) const { return kept_[static_cast<size_t>(i)]; }
  // Memory of rank r holding [i, e) only, given max_{u in [i, e)} rise_at(u) and the sum of
  // its peak terms' maxima.
  double memory(int rank, int i, int e, double max_rise, double peaks) const {
    return rank_bytes(p_, rank, static_bytes(i, e), kept(i, e), max_rise - kept_prefix(i), peaks, e == n_, i == 0);
  }

 private:
  const PartitionProblem& p_;
  int n_;
  std::vector<double> time_, static_, kept_, rise_;
};

// Sliding-window maxima over a window [lo, e) that only moves forward: of the rise (series 0)
// and of every peak term (series 1..k).
class WindowMax {
 public:
  explicit WindowMax(const Costs& c) : c_(c), q_(c.problem().peak_bytes.size() + 1) {}
  void clear() {
    for (auto& q : q_) q.clear();
  }
  void push(int u) {
    for (size_t k = 0; k < q_.size(); ++k) {
      auto& q = q_[k];
      while (!q.empty() && value(k, q.back()) <= value(k, u)) q.pop_back();
      q.push_back(u);
    }
  }
  void pop_below(int lo) {
    for (auto& q : q_)
      while (!q.empty() && q.front() < lo) q.pop_front();
  }
  double rise() const { return q_[0].empty() ? 0.0 : value(0, q_[0].front()); }
  double peaks() const {
    double s = 0;
    for (size_t k = 1; k < q_.size(); ++k)
      if (!q_[k].empty()) s += value(k, q_[k].front());
    return s;
  }
  double memory(int rank, int i, int e) const { return c_.memory(rank, i, e, rise(), peaks()); }

 private:
  double value(size_t k, int u) const {
    return k == 0 ? c_.rise_at(u) : c_.problem().peak_bytes[k - 1][static_cast<size_t>(u)];
  }
  const Costs& c_;
  std::vector<std::deque<int>> q_;
};

// Rank times and memory of splits given by chunk boundaries b[0] = 0 < ... < b[S] = n, with
// the prefix sums built once and scratch space reused (the local search evaluates thousands).
class Evaluator {
 public:
  explicit Evaluator(const PartitionProblem& p)
      : p_(p), c_(p), time_(static_cast<size_t>(p.pp)), mem_(static_cast<size_t>(p.pp)), static_(time_.size()),
        kept_(time_.size()), rise_(time_.size()), peak_(time_.size() * p.peak_bytes.size()), first_(time_.size()),
        last_(time_.size()) {}
  const Costs& costs() const { return c_; }
  const std::vector<double>& time() const { return time_; }
  const std::vector<double>& memory() const { return mem_; }
  void run(const std::vector<int>& b) {
    const size_t R = time_.size(), K = p_.peak_bytes.size();
    const int n = c_.n();
    std::fill(time_.begin(), time_.end(), 0.0);
    std::fill(static_.begin(), static_.end(), 0.0);
    std::fill(kept_.begin(), kept_.end(), 0.0);
    std::fill(rise_.begin(), rise_.end(), 0.0);
    std::fill(peak_.begin(), peak_.end(), 0.0);
    std::fill(first_.begin(), first_.end(), 0);
    std::fill(last_.begin(), last_.end(), 0);
    for (size_t ci = 0; ci + 1 < b.size(); ++ci) {
      const size_t r = ci % R;
      const int i = b[ci], e = b[ci + 1];
      time_[r] += c_.time(i, e);
      static_[r] += c_.static_bytes(i, e);
      // The rank's kept bytes before this chunk plus the chunk's own rise.
      double chunk_rise = c_.rise_at(i);
      for (int u = i + 1; u < e; ++u) chunk_rise = std::max(chunk_rise, c_.rise_at(u));
      rise_[r] = std::max(rise_[r], kept_[r] + (chunk_rise - c_.kept_prefix(i)));
      kept_[r] += c_.kept(i, e);
      for (size_t k = 0; k < K; ++k) {
        double& mx = peak_[r * K + k];
        const auto& v = p_.peak_bytes[k];
        for (int u = i; u < e; ++u) mx = std::max(mx, v[static_cast<size_t>(u)]);
      }
      if (i == 0) first_[r] = 1;
      if (e == n) last_[r] = 1;
    }
    for (size_t r = 0; r < R; ++r) {
      double peaks = 0;
      for (size_t k = 0; k < K; ++k) peaks += peak_[r * K + k];
      mem_[r] = rank_bytes(p_, static_cast<int>(r), static_[r], kept_[r], rise_[r], peaks, last_[r], first_[r]);
    }
  }

 private:
  const PartitionProblem& p_;
  Costs c_;
  std::vector<double> time_, mem_, static_, kept_, rise_, peak_;
  std::vector<char> first_, last_;
};

// ---- vp = 1 -------------------------------------------------------------------------------

// Stage ranges from boundaries b[0] = 0 < b[1] < ... < b[S] = n.
std::vector<plan::StageAssignment> from_bounds(const std::vector<int>& b) {
  std::vector<plan::StageAssignment> out;
  for (size_t c = 0; c + 1 < b.size(); ++c) out.push_back({b[c], b[c + 1] - 1});
  return out;
}


// Exact feasibility of "every stage takes <= max_time_s and holds <= min(capacity, max_bytes)",
// with the tables needed to rebuild a split: lo[s][e] = smallest start i such that stage s may
// own [i, e); reach[s][e] = units [0, e) can be covered by stages 0..s.
struct Reach {
  int stages = 0, n = 0;
  std::vector<int> lo;      // stages x (n + 1)
  std::vector<char> reach;  // stages x (n + 1)
  int lo_at(int s, int e) const { return lo[static_cast<size_t>(s * (n + 1) + e)]; }
  bool reach_at(int s, int e) const { return reach[static_cast<size_t>(s * (n + 1) + e)] != 0; }
};

bool reachable(const Costs& c, double max_time_s, double max_bytes, Reach* out) {
  const PartitionProblem& p = c.problem();
  const int n = c.n(), S = p.pp;
  const double cap = std::min(p.capacity_bytes, max_bytes);
  Reach local;
  Reach& R = out ? *out : local;
  R.stages = S;
  R.n = n;
  R.lo.assign(static_cast<size_t>(S * (n + 1)), n + 1);
  R.reach.assign(static_cast<size_t>(S * (n + 1)), 0);
  WindowMax w(c);
  std::vector<int> prefix(static_cast<size_t>(n) + 2, 0);  // prefix[i] = reachable ends < i of stage s-1
  for (int s = 0; s < S; ++s) {
    const size_t row = static_cast<size_t>(s * (n + 1));
    if (s == 0) {
      // Stage 0 starts at unit 0; its ranges only grow with e.
      w.clear();
      for (int e = 1; e <= n; ++e) {
        w.push(e - 1);
        if (c.time(0, e) > max_time_s || w.memory(0, 0, e) > cap) break;
        R.lo[row + static_cast<size_t>(e)] = 0;
        R.reach[row + static_cast<size_t>(e)] = 1;
      }
    } else {
      const size_t prev = static_cast<size_t>((s - 1) * (n + 1));
      for (int i = 0; i <= n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + R.reach[prev + static_cast<size_t>(i)];
      // Ranges of stages >= 1 never hold unit 0, which keeps memory monotone in the range.
      int lo = 1;
      w.clear();
      for (int e = 2; e <= n; ++e) {
        w.push(e - 1);
        while (lo < e && (c.time(lo, e) > max_time_s || w.memory(s, lo, e) > cap)) {
          ++lo;
          w.pop_below(lo);
        }
        R.lo[row + static_cast<size_t>(e)] = lo;
        // Some start i in [lo, e-1] where stages 0..s-1 end exactly.
        if (lo <= e - 1 && prefix[static_cast<size_t>(e)] - prefix[static_cast<size_t>(lo)] > 0) R.reach[row + static_cast<size_t>(e)] = 1;
      }
    }
  }
  return R.reach_at(S - 1, n);
}

// Rebuilds a split from reachability tables, filling later stages first.
std::vector<plan::StageAssignment> rebuild(const Reach& R) {
  std::vector<plan::StageAssignment> out(static_cast<size_t>(R.stages));
  int e = R.n;
  for (int s = R.stages - 1; s >= 1; --s) {
    int i = R.lo_at(s, e);
    while (i < e && !R.reach_at(s - 1, i)) ++i;
    TP_ASSERT(i < e);
    out[static_cast<size_t>(s)] = {i, e - 1};
    e = i;
  }
  out[0] = {0, e - 1};
  return out;
}

// Time-only greedy: can `stages` contiguous stages each take <= t? (n >= stages).
bool greedy_fits(const Costs& c, int stages, double t) {
  int used = 1, start = 0;
  for (int e = 1; e <= c.n(); ++e) {
    if (c.time(start, e) > t) {
      if (c.time(e - 1, e) > t) return false;
      if (++used > stages) return false;
      start = e - 1;
    }
  }
  return true;
}

// Time-only split with bottleneck <= t, later stages as full as possible (each stage keeps at
// least one unit for every stage before it).
std::vector<plan::StageAssignment> greedy_backward(const Costs& c, int stages, double t) {
  std::vector<plan::StageAssignment> out(static_cast<size_t>(stages));
  if (out.empty()) return out;
  int e = c.n();
  for (int s = stages - 1; s >= 1; --s) {
    int i = e - 1;
    while (i - 1 >= s && c.time(i - 1, e) <= t) --i;
    out[static_cast<size_t>(s)] = {i, e - 1};
    e = i;
  }
  out[0] = {0, e - 1};
  return out;
}

// Smallest t in [lo, hi] with pred(t) true, pred monotone, pred(hi) true: bisection down to
// adjacent doubles.
template <typename Pred>
double bisect(double lo, double hi, Pred&& pred) {
  if (pred(lo)) return lo;
  for (int it = 0; it < 200; ++it) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    (pred(mid) ? hi : lo) = mid;
  }
  return hi;
}

// Sorted distinct range sums of the time prefix: the candidate bottlenecks.
std::vector<double> range_sums(const Costs& c, double at_least) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(c.n() * (c.n() + 1) / 2));
  for (int i = 0; i < c.n(); ++i)
    for (int e = i + 1; e <= c.n(); ++e) {
      const double t = c.time(i, e);
      if (t >= at_least) v.push_back(t);
    }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

bool unlimited_memory(const PartitionProblem& p) { return !std::isfinite(p.capacity_bytes); }

// Memory-balanced split for vp = 1: the smallest per-rank byte bound that some split meets.
std::vector<plan::StageAssignment> min_max_memory(const Costs& c) {
  const PartitionProblem& p = c.problem();
  PartitionProblem unlimited = p;
  unlimited.capacity_bytes = kUnbounded;
  const Costs cu(unlimited);
  // Any split bounds the optimum from above: units dealt out evenly.
  std::vector<int> b{0};
  for (int s = 0; s < p.pp; ++s) b.push_back(b.back() + c.n() / p.pp + (s < c.n() % p.pp ? 1 : 0));
  const double hi = evaluate_partition(unlimited, from_bounds(b)).max_memory_bytes();
  const double best = bisect(0.0, hi, [&](double m) { return reachable(cu, kUnbounded, m, nullptr); });
  Reach R;
  const bool ok = reachable(cu, kUnbounded, best, &R);
  TP_ASSERT(ok);
  return rebuild(R);
}

// Empty when nothing fits and `fallback` is off; else the split (the memory-balanced one when
// nothing fits).
std::vector<plan::StageAssignment> partition_vp1(const Costs& c, Balance balance, bool fallback) {
  const PartitionProblem& p = c.problem();
  const int n = c.n(), S = p.pp;
  if (S == 1) return {{0, n - 1}};
  if (balance == Balance::memory) return min_max_memory(c);
  const double max_unit = *std::max_element(p.unit_time_s.begin(), p.unit_time_s.end());
  const double lower = std::max(max_unit, c.time(0, n) / S);
  if (unlimited_memory(p)) {
    const double t = bisect(0.0, c.time(0, n), [&](double x) { return x >= max_unit && greedy_fits(c, S, x); });
    (void)lower;
    return greedy_backward(c, S, t);
  }
  // Does anything fit at all? (Cheap, and decides most hopeless candidates.)
  if (!reachable(c, kUnbounded, kUnbounded, nullptr)) return fallback ? min_max_memory(c) : std::vector<plan::StageAssignment>{};
  const std::vector<double> sums = range_sums(c, lower * (1 - 1e-12));
  size_t lo = 0, hi = sums.size() - 1;  // sums.back() = the whole model's time: feasible
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (reachable(c, sums[mid], kUnbounded, nullptr)) hi = mid;
    else lo = mid + 1;
  }
  Reach R;
  const bool ok = reachable(c, sums[lo], kUnbounded, &R);
  TP_ASSERT(ok);
  return rebuild(R);
}

// ---- vp > 1 -------------------------------------------------------------------------------

// Lexicographic score of a split: memory excess first, then the balanced value's maximum,
// then its sum of squares.
struct Score {
  double excess = 0, primary = 0, secondary = 0;
};
bool better(const Score& a, const Score& b) {
  auto lt = [](double x, double y) { return x < y - 1e-12 * std::max(std::abs(x), std::abs(y)); };
  auto gt = [](double x, double y) { return x > y + 1e-12 * std::max(std::abs(x), std::abs(y)); };
  if (lt(a.excess, b.excess)) return true;
  if (gt(a.excess, b.excess)) return false;
  if (lt(a.primary, b.primary)) return true;
  if (gt(a.primary, b.primary)) return false;
  return lt(a.secondary, b.secondary);
}

Score score_of(const PartitionProblem& p, const Evaluator& ev, Balance balance) {
  Score s;
  for (size_t r = 0; r < ev.memory().size(); ++r) {
    s.excess += std::max(0.0, ev.memory()[r] - p.capacity_bytes);
    const double v = balance == Balance::time ? ev.time()[r] : ev.memory()[r];
    s.primary = std::max(s.primary, v);
    s.secondary += v * v;
  }
  return s;
}

// Local search over the chunk boundaries b[1..S-1] until no move improves the score: each
// boundary moves to its best position between its neighbours, and runs of consecutive
// boundaries shift together by one unit (which moves load between two distant chunks while
// the chunks between keep their sizes).
std::vector<int> descend(const PartitionProblem& p, std::vector<int> b, Balance balance, Score& best, bool shifts = true) {
  const int S = static_cast<int>(b.size()) - 1;
  Evaluator ev(p);
  auto score = [&](const std::vector<int>& x) {
    ev.run(x);
    return score_of(p, ev, balance);
  };
  best = score(b);
  for (int sweep = 0; sweep < 256; ++sweep) {
    bool moved = false;
    for (int k = 1; k < S; ++k) {
      const size_t kk = static_cast<size_t>(k);
      int best_pos = b[kk];
      for (int pos = b[kk - 1] + 1; pos <= b[kk + 1] - 1; ++pos) {
        if (pos == b[kk]) continue;
        const int keep = b[kk];
        b[kk] = pos;
        const Score s = score(b);
        b[kk] = keep;
        if (better(s, best)) {
          best = s;
          best_pos = pos;
        }
      }
      if (best_pos != b[kk]) {
        b[kk] = best_pos;
        moved = true;
      }
    }
    // Shifts of runs b[k1..k2] by +-1 (valid when the chunks at both ends keep a unit).
    std::vector<int> best_b;
    for (int k1 = 1; shifts && k1 < S; ++k1)
      for (int k2 = k1 + 1; k2 < S; ++k2)
        for (int d : {-1, 1}) {
          const size_t a = static_cast<size_t>(k1), z = static_cast<size_t>(k2);
          if (d < 0 && b[a] - 1 <= b[a - 1]) continue;
          if (d > 0 && b[z] + 1 >= b[z + 1]) continue;
          std::vector<int> x = b;
          for (size_t k = a; k <= z; ++k) x[k] += d;
          const Score s = score(x);
          if (better(s, best)) {
            best = s;
            best_b = std::move(x);
          }
        }
    if (!best_b.empty()) {
      b = std::move(best_b);
      moved = true;
    }
    if (!moved) break;
  }
  return b;
}

// Every split, best by the objective of brute_force_partition (fitting first; time or memory).
Partition exhaustive(const PartitionProblem& p, Balance balance) {
  const int n = p.num_units(), S = p.pp * p.vp;
  std::vector<int> b(static_cast<size_t>(S) + 1);
  for (int k = 0; k < S; ++k) b[static_cast<size_t>(k)] = k;
  b[static_cast<size_t>(S)] = n;
  Evaluator ev(p);
  std::vector<int> best;
  bool best_fits = false;
  double best_value = kUnbounded;
  // Boundaries b[1] < ... < b[S-1] in (0, n), lexicographically.
  while (true) {
    ev.run(b);
    const double max_time = *std::max_element(ev.time().begin(), ev.time().end());
    const double max_mem = *std::max_element(ev.memory().begin(), ev.memory().end());
    const bool fits = max_mem <= p.capacity_bytes;
    double value = max_mem;
    bool take = false;
    if (balance == Balance::time) {
      value = fits ? max_time : max_mem;
      take = best.empty() || (fits && !best_fits) || (fits == best_fits && value < best_value);
    } else {
      take = best.empty() || value < best_value;
    }
    if (take) {
      best = b;
      best_fits = fits;
      best_value = value;
    }
    int k = S - 1;
    while (k >= 1 && b[static_cast<size_t>(k)] == n - (S - k)) --k;
    if (k < 1) break;
    ++b[static_cast<size_t>(k)];
    for (int j = k + 1; j < S; ++j) b[static_cast<size_t>(j)] = b[static_cast<size_t>(j) - 1] + 1;
  }
  return evaluate_partition(p, from_bounds(best));
}

// C(n, k), saturating at `cap`.
double choose(int n, int k, double cap) {
  double c = 1;
  for (int i = 1; i <= k; ++i) {
    c = c * (n - k + i) / i;
    if (c > cap) return cap;
  }
  return c;
}

// Interleaved splits this small are enumerated outright.
constexpr double kExhaustiveSplits = 4096;

std::vector<plan::StageAssignment> partition_interleaved(const Costs& c, Balance balance, bool thorough) {
  const PartitionProblem& p = c.problem();
  const int S = p.pp * p.vp, n = c.n();
  if (thorough && choose(n - 1, S - 1, kExhaustiveSplits + 1) <= kExhaustiveSplits) return exhaustive(p, balance).stages;
  // Start: the chunk-level min-max split of time.
  const double max_unit = *std::max_element(p.unit_time_s.begin(), p.unit_time_s.end());
  const double t = bisect(0.0, c.time(0, n), [&](double x) { return x >= max_unit && greedy_fits(c, S, x); });
  std::vector<int> start;
  for (const auto& a : greedy_backward(c, S, t)) start.push_back(a.first_unit);
  start.push_back(n);
  // A second start: units dealt out evenly over the chunks.
  std::vector<int> even{0};
  for (int k = 0; k < S; ++k) even.push_back(even.back() + n / S + (k < n % S ? 1 : 0));
  Score best;
  std::vector<int> b;
  if (!thorough) return from_bounds(descend(p, start, balance, best, false));
  auto consider = [&](std::vector<int> x, Score s) {
    if (b.empty() || better(s, best)) {
      best = s;
      b = std::move(x);
    }
  };
  for (const auto& from : {start, even}) {
    Score s;
    std::vector<int> x = descend(p, from, balance, s);
    consider(std::move(x), s);
    if (balance == Balance::time && std::isfinite(p.capacity_bytes)) {
      // Memory may wall the time descent in: also balance memory first, then time.
      Score m;
      std::vector<int> y = descend(p, descend(p, from, Balance::memory, m), Balance::time, m);
      consider(std::move(y), m);
    }
  }
  return from_bounds(b);
}

void check_problem(const PartitionProblem& p) {
  const size_t n = p.unit_time_s.size();
  const int S = p.pp * p.vp;
  if (p.pp < 1 || p.vp < 1) throw Error(fmt::format("pp = {} and vp = {} must be at least 1", p.pp, p.vp));
  if (static_cast<int>(n) < S)
    throw Error(fmt::format("{} layer units cannot fill {} pipeline stages ({} ranks x {} chunks)", n, S, p.pp, p.vp))
        .hint("use fewer pipeline stages or virtual stages");
  TP_ASSERT(p.static_bytes.size() == n && p.kept_bytes.size() == n && p.excursion_bytes.size() == n);
  TP_ASSERT(p.fixed_bytes.size() == static_cast<size_t>(p.pp) && p.in_flight.size() == static_cast<size_t>(p.pp));
  for (const auto& k : p.peak_bytes) TP_ASSERT(k.size() == n);
  for (double t : p.unit_time_s) TP_ASSERT(std::isfinite(t) && t >= 0);
}

}  // namespace

Partition evaluate_partition(const PartitionProblem& p, std::vector<plan::StageAssignment> stages) {
  const int n = p.num_units();
  TP_ASSERT(stages.size() == static_cast<size_t>(p.pp * p.vp));
  std::vector<int> b;
  int next = 0;
  for (const auto& a : stages) {
    TP_ASSERT(a.first_unit == next && a.last_unit >= a.first_unit && a.last_unit < n);
    b.push_back(a.first_unit);
    next = a.last_unit + 1;
  }
  TP_ASSERT(next == n);
  b.push_back(n);
  Evaluator ev(p);
  ev.run(b);
  Partition out;
  out.rank_time_s = ev.time();
  out.rank_memory_bytes = ev.memory();
  out.fits = std::all_of(out.rank_memory_bytes.begin(), out.rank_memory_bytes.end(), [&](double m) { return m <= p.capacity_bytes; });
  out.stages = std::move(stages);
  return out;
}

Partition partition_units(const PartitionProblem& p, Balance balance, bool thorough) {
  check_problem(p);
  const Costs c(p);
  if (p.vp == 1) return evaluate_partition(p, partition_vp1(c, balance, true));
  return evaluate_partition(p, partition_interleaved(c, balance, thorough));
}

std::optional<Partition> fitting_partition(const PartitionProblem& p, Balance balance, bool thorough) {
  check_problem(p);
  const Costs c(p);
  Partition out;
  if (p.vp == 1) {
    std::vector<plan::StageAssignment> st = partition_vp1(c, balance, false);
    if (st.empty()) return std::nullopt;
    out = evaluate_partition(p, std::move(st));
  } else {
    out = evaluate_partition(p, partition_interleaved(c, balance, thorough));
  }
  if (!out.fits) return std::nullopt;
  return out;
}

Partition brute_force_partition(const PartitionProblem& p, Balance balance) {
  check_problem(p);
  return exhaustive(p, balance);
}

namespace {

// Bytes per parameter of the model states (plan/memory.hpp: Rajbhandari et al. 2020).
struct StateBytes {
  double w = 2, g = 2, o = 12;  // weights, gradients, optimizer (mixed precision)
  double dp = 1;
  int zero = 0;
  double weights() const { return w / (zero >= 3 ? dp : 1.0); }
  double gradients() const { return g / (zero >= 2 ? dp : 1.0); }
  double optimizer() const { return o / (zero >= 1 ? dp : 1.0); }
  double per_param() const { return weights() + gradients() + optimizer(); }
};

StateBytes state_bytes(const plan::Plan& plan, const plan::PlanContext& ctx) {
  const bool mixed = is_mixed(plan.precision_or(ctx.precision));
  StateBytes b;
  b.w = mixed ? 2.0 : 4.0;
  b.g = plan::gradient_bytes_per_param(plan, ctx);
  b.o = mixed ? 12.0 : 8.0;
  b.dp = static_cast<double>(plan.dp_cp());  // ZeRO shards over the ranks holding the same parameters
  b.zero = plan.zero_stage;
  return b;
}

// Per-rank constant bytes: framework reserve, the GPU's cuBLAS workspace (catalog),
// data-parallel buckets.
double fixed_rank_bytes(const plan::Plan& plan, const plan::PlanContext& ctx, const plan::MemoryOptions& options) {
  double fixed = options.framework_overhead_bytes + ctx.gpu->cublas_workspace_bytes;
  if (plan.dp_cp() > 1 && plan.zero_stage == 0 && plan.dp_algorithm != plan::DpAlgorithm::parameter_server)
    fixed += 2.0 * plan.bucket_size_bytes;
  if (plan.dp_cp() > 1 && plan.zero_stage >= 1 && plan.zero_stage <= 2) fixed += 2.0 * plan.bucket_size_bytes;
  return fixed;
}

double logits_bytes(const plan::Plan& plan, const plan::PlanContext& ctx) {
  if (ctx.model_spec.vocab <= 0) return 0.0;
  return static_cast<double>(plan.micro_batch) * static_cast<double>(ctx.seq_len) * static_cast<double>(ctx.model_spec.vocab) /
         plan.tp / plan.cp * 4.0;
}

double tied_copy_params(const plan::Plan& plan, const plan::PlanContext& ctx) {
  if (!ctx.model_spec.tied_embeddings) return 0.0;
  return static_cast<double>(ctx.model_spec.vocab) * static_cast<double>(ctx.model_spec.hidden) / plan.tp;
}

}  // namespace

UnitMemoryTerms unit_memory_terms(const plan::Plan& plan, const plan::PlanContext& ctx) {
  const auto& graph = ctx.graph;
  const size_t n = graph.units().size();
  const Precision prec = plan.precision_or(ctx.precision);
  const double elem = bytes_per_element(prec);
  const int tp = plan.tp;
  const double b = static_cast<double>(plan.micro_batch);
  UnitMemoryTerms t;
  t.params.assign(n, 0.0);
  t.kept_bytes.assign(n, 0.0);
  t.excursion_bytes.assign(n, 0.0);
  t.send_bytes.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const auto& ops = graph.units()[i].ops;
    for (int id : ops) {
      const auto& op = graph.ops()[static_cast<size_t>(id)];
      const bool split = op.tp_split == models::TpSplit::column || op.tp_split == models::TpSplit::row ||
                         op.tp_split == models::TpSplit::heads || op.tp_split == models::TpSplit::vocab;
      t.params[i] += split ? op.params / tp : op.params;
    }
    // The replay's own per-unit numbers (plan::unit_activation_profile): kept bytes, and the
    // rise above them during the unit's forward (cp's gathered K, V) or backward
    // (recomputation, cp's transients). Both rises sit on the same base in the replay of the
    // newest micro-batch in flight (its earlier units kept), so the larger one is the unit's
    // excursion.
    const plan::UnitActivationProfile prof = plan::unit_activation_profile(plan, ctx, static_cast<int>(i));
    t.kept_bytes[i] = prof.kept_bytes;
    t.excursion_bytes[i] = std::max(prof.forward_rise_bytes, prof.backward_rise_bytes);
    double msg = graph.units()[i].output_elems * b * elem / plan.cp;
    if (plan.sequence_parallel) msg /= tp;
    t.send_bytes[i] = msg;
  }
  return t;
}

PartitionProblem make_partition_problem(const plan::Plan& plan, const plan::PlanContext& ctx, std::vector<double> unit_time_s,
                                        const plan::MemoryOptions& options) {
  return make_partition_problem(plan, ctx, std::move(unit_time_s), unit_memory_terms(plan, ctx), options);
}

PartitionProblem make_partition_problem(const plan::Plan& plan, const plan::PlanContext& ctx, std::vector<double> unit_time_s,
                                        const UnitMemoryTerms& terms, const plan::MemoryOptions& options) {
  const size_t n = ctx.graph.units().size();
  TP_ASSERT(unit_time_s.size() == n && terms.params.size() == n);
  const StateBytes sb = state_bytes(plan, ctx);
  PartitionProblem p;
  p.pp = plan.pp;
  p.vp = plan.vp;
  p.unit_time_s = std::move(unit_time_s);
  p.static_bytes.resize(n);
  for (size_t i = 0; i < n; ++i) p.static_bytes[i] = terms.params[i] * sb.per_param();
  p.kept_bytes = terms.kept_bytes;
  p.excursion_bytes = terms.excursion_bytes;
  if (plan.zero_stage == 3) {
    std::vector<double> gathered(n);
    for (size_t i = 0; i < n; ++i) gathered[i] = 2.0 * terms.params[i] * sb.w;  // the unit in use + the prefetched one
    p.peak_bytes.push_back(std::move(gathered));
  }
  if (plan.pp > 1) {
    std::vector<double> p2p(n);
    for (size_t i = 0; i < n; ++i) p2p[i] = 4.0 * terms.send_bytes[i];  // send + recv, activations + gradients
    p.peak_bytes.push_back(std::move(p2p));
  }
  p.fixed_bytes.assign(static_cast<size_t>(plan.pp), fixed_rank_bytes(plan, ctx, options));
  for (int r = 0; r < plan.pp; ++r)
    p.in_flight.push_back(plan::micro_batches_in_flight(plan.schedule, plan.pp, plan.vp, plan.num_micro_batches, r));
  p.last_bytes = logits_bytes(plan, ctx);
  p.last_without_first_bytes = tied_copy_params(plan, ctx) * sb.per_param();
  p.capacity_bytes = ctx.gpu->memory_bytes * options.usable_fraction;
  return p;
}

std::vector<plan::MemoryBreakdown> memory_per_rank(const plan::Plan& plan, const plan::PlanContext& ctx, const UnitMemoryTerms& terms,
                                                  const plan::MemoryOptions& options) {
  const int n = static_cast<int>(terms.params.size());
  TP_ASSERT(plan.stages.size() == static_cast<size_t>(plan.pp * plan.vp));
  const StateBytes sb = state_bytes(plan, ctx);
  std::vector<plan::MemoryBreakdown> out(static_cast<size_t>(plan.pp));
  for (int r = 0; r < plan.pp; ++r) {
    plan::MemoryBreakdown& m = out[static_cast<size_t>(r)];
    m.stage = r;
    m.capacity_bytes = ctx.gpu->memory_bytes * options.usable_fraction;
    double params = 0, max_params = 0, kept = 0, rise = 0, max_send = 0;
    bool owns_first = false, owns_last = false;
    for (int v = 0; v < plan.vp; ++v) {
      const auto& a = plan.stages[static_cast<size_t>(v * plan.pp + r)];
      // The rank's kept bytes before this chunk plus the chunk's own rise (PartitionProblem).
      double chunk_kept = 0;
      for (int u = a.first_unit; u <= a.last_unit; ++u) {
        const size_t i = static_cast<size_t>(u);
        params += terms.params[i];
        max_params = std::max(max_params, terms.params[i]);
        chunk_kept += terms.kept_bytes[i];
        rise = std::max(rise, kept + chunk_kept + terms.excursion_bytes[i]);
        max_send = std::max(max_send, terms.send_bytes[i]);
      }
      kept += chunk_kept;
      owns_first = owns_first || a.first_unit == 0;
      owns_last = owns_last || a.last_unit == n - 1;
    }
    if (owns_last && !owns_first) params += tied_copy_params(plan, ctx);
    m.params_on_rank = params;
    m.weights_bytes = params * sb.weights();
    m.gradients_bytes = params * sb.gradients();
    m.optimizer_bytes = params * sb.optimizer();
    m.micro_batches_in_flight = plan::micro_batches_in_flight(plan.schedule, plan.pp, plan.vp, plan.num_micro_batches, r);
    m.activations_bytes = (m.micro_batches_in_flight - 1.0) * kept + std::max(kept, rise);
    m.workspace_bytes = ctx.gpu->cublas_workspace_bytes + (owns_last ? logits_bytes(plan, ctx) : 0.0);
    m.comm_buffer_bytes = fixed_rank_bytes(plan, ctx, options) - options.framework_overhead_bytes - ctx.gpu->cublas_workspace_bytes;
    if (plan.zero_stage == 3) m.comm_buffer_bytes += 2.0 * max_params * sb.w;
    if (plan.pp > 1) m.comm_buffer_bytes += 4.0 * max_send;
    m.framework_bytes = options.framework_overhead_bytes;
  }
  return out;
}

std::vector<StageLoad> stage_loads(const plan::Plan& plan, const plan::PlanContext& ctx) {
  const std::vector<double> t = unit_times_s(plan, ctx);
  std::vector<StageLoad> out;
  for (int r = 0; r < plan.pp; ++r) {
    StageLoad s;
    s.rank = r;
    for (int v = 0; v < plan.vp; ++v) {
      const auto& a = plan.stages[static_cast<size_t>(v * plan.pp + r)];
      s.chunks.push_back(a);
      s.units += a.last_unit - a.first_unit + 1;
      for (int u = a.first_unit; u <= a.last_unit; ++u) s.time_s += t[static_cast<size_t>(u)];
    }
    const auto m = plan::stage_memory(plan, ctx, r);
    s.memory_bytes = m.total_bytes();
    s.capacity_bytes = m.capacity_bytes;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace trainplan::planner
