// Objectives, bounds of the lazy stages, rank correlation and the winner's explanation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "search_internal.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::planner {
namespace detail {

Key objective_key(const SearchRequest& req, double time_s, std::optional<double> cost_usd) {
  const double cost = cost_usd ? *cost_usd : kInf;
  switch (req.objective) {
    case Objective::time: return {0, time_s, cost};
    case Objective::cost: return {0, cost, time_s};
    case Objective::cost_under_deadline:
      return time_s <= req.deadline_s ? Key{0, cost, time_s} : Key{1, time_s, cost};
    case Objective::time_under_budget:
      return cost <= req.budget_usd ? Key{0, time_s, cost} : Key{1, cost, time_s};
  }
  return {0, time_s, cost};
}

bool needs_job_model(const SearchRequest& req) { return req.both_purchases || req.purchase == plan::Purchase::spot; }

std::pair<double, std::optional<double>> lower_bound(const SearchRequest& req, const plan::PlanContext& ctx, const Candidate& c,
                                                     double step_time_s) {
  const double time = c.steps * step_time_s;
  std::optional<double> price;
  const auto od = on_demand_price(*ctx.instance, req.platform);
  const auto spot = spot_price(*ctx.instance, req.platform);
  if (req.both_purchases) {
    if (od) price = od;
    if (spot) price = price ? std::min(*price, *spot) : *spot;
  } else if (req.purchase == plan::Purchase::capacity_block) {
    // The block cost grows with time: at the lower bound of time it is a lower bound.
    return {time, capacity_block_cost_usd(*ctx.instance, req.platform, c.plan.instance_count, time)};
  } else {
    price = req.purchase == plan::Purchase::spot ? spot : od;
  }
  std::optional<double> cost;
  if (price) cost = time / 3600.0 * *price * c.plan.instance_count;
  return {time, cost};
}


void settle(const SearchRequest& req, const plan::PlanContext& ctx, Candidate& c) {
  c.time_to_train_s = c.steps * c.step_time_s();
  const double hours = c.time_to_train_s / 3600.0;
  c.cost_on_demand_usd.reset();
  c.cost_spot_usd.reset();
  c.transfer_usd = transfer_usd(ctx, c, req.tokens, req.samples_per_epoch, req.epochs);
  if (auto price = on_demand_price(*ctx.instance, req.platform))
    c.cost_on_demand_usd = hours * *price * c.plan.instance_count + c.transfer_usd;
  if (auto price = spot_price(*ctx.instance, req.platform)) c.cost_spot_usd = hours * *price * c.plan.instance_count + c.transfer_usd;
  c.cost_capacity_block_usd = capacity_block_cost_usd(*ctx.instance, req.platform, c.plan.instance_count, c.time_to_train_s);
  if (c.cost_capacity_block_usd) *c.cost_capacity_block_usd += c.transfer_usd;
  auto take = [&](plan::Purchase p, double t, std::optional<double> cost) {
    c.purchase = p;
    c.objective_time_s = t;
    c.objective_cost_usd = cost;
  };
  if (req.purchase == plan::Purchase::capacity_block && !req.both_purchases) {
    take(plan::Purchase::capacity_block, c.time_to_train_s, c.cost_capacity_block_usd);
  } else if (!needs_job_model(req)) {
    take(plan::Purchase::on_demand, c.time_to_train_s, c.cost_on_demand_usd);
  } else if (!req.both_purchases) {
    if (c.spot_job) take(plan::Purchase::spot, c.spot_job->expected_time_s, c.spot_job->expected_cost_usd);
    else {
      // Not (yet) evaluated with the job model: the compute-only lower bound.
      auto [t, cost] = lower_bound(req, ctx, c, c.step_time_s());
      take(plan::Purchase::spot, t, cost);
    }
  } else {
    std::optional<Key> best;
    for (const auto* job : {&c.on_demand_job, &c.spot_job}) {
      if (!*job) continue;
      const Key k = objective_key(req, (*job)->expected_time_s, (*job)->expected_cost_usd);
      if (!best || k < *best) {
        best = k;
        take((*job)->purchase, (*job)->expected_time_s, (*job)->expected_cost_usd);
      }
    }
    if (!best) {
      auto [t, cost] = lower_bound(req, ctx, c, c.step_time_s());
      take(plan::Purchase::on_demand, t, cost);
    }
  }
  c.plan.purchase = c.purchase;
  const Key k = objective_key(req, c.objective_time_s, c.objective_cost_usd);
  c.meets_constraints = k.violated == 0;
}

std::vector<bool> may_matter(const std::vector<Bound>& lower, const std::vector<Bound>& exact, size_t keep) {
  std::vector<bool> out(lower.size(), true);
  if (keep == 0 || exact.size() < keep) return out;
  // The keep-th best exact key: anything strictly worse cannot enter the best `keep`.
  std::vector<Key> keys;
  keys.reserve(exact.size());
  for (const auto& e : exact) keys.push_back(e.key);
  std::nth_element(keys.begin(), keys.begin() + static_cast<long>(keep - 1), keys.end());
  const Key kth = keys[keep - 1];
  // The exact points' frontier, by time ascending (costs then strictly descending).
  std::vector<std::pair<double, double>> pts;
  for (const auto& e : exact)
    if (std::isfinite(e.cost_usd)) pts.emplace_back(e.time_s, e.cost_usd);
  std::sort(pts.begin(), pts.end());
  std::vector<std::pair<double, double>> front;
  for (const auto& p : pts)
    if (front.empty() || p.second < front.back().second) front.push_back(p);
  for (size_t i = 0; i < lower.size(); ++i) {
    const Bound& b = lower[i];
    if (!(kth < b.key)) continue;  // may be among the best `keep`
    if (!std::isfinite(b.cost_usd)) {
      out[i] = false;  // no price: never on the frontier
      continue;
    }
    // The cheapest frontier point at most as slow as b; b's exact point, no better than b in
    // either coordinate, is dominated when that point is no worse in both and better in one.
    auto it = std::upper_bound(front.begin(), front.end(), std::make_pair(b.time_s, kInf));
    bool dominated = false;
    if (it != front.begin()) {
      const auto& f = *std::prev(it);
      dominated = f.second <= b.cost_usd && (f.first < b.time_s || f.second < b.cost_usd);
    }
    out[i] = !dominated;
  }
  return out;
}

}  // namespace detail

std::vector<size_t> pareto_frontier(const std::vector<std::pair<double, double>>& points) {
  std::vector<size_t> order;
  for (size_t i = 0; i < points.size(); ++i)
    if (std::isfinite(points[i].first) && std::isfinite(points[i].second)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (points[a].first != points[b].first) return points[a].first < points[b].first;
    return points[a].second < points[b].second;
  });
  // Sweep by x: a point is on the frontier when its y is below every y seen so far.
  std::vector<size_t> out;
  double best_y = std::numeric_limits<double>::infinity();
  for (size_t i : order) {
    if (points[i].second < best_y) {
      out.push_back(i);
      best_y = points[i].second;
    }
  }
  return out;
}

std::vector<size_t> pareto_candidates(const std::vector<Candidate>& cands) {
  std::vector<std::pair<double, double>> points;
  points.reserve(cands.size());
  for (const auto& c : cands)
    points.emplace_back(c.objective_time_s, c.objective_cost_usd ? *c.objective_cost_usd : std::numeric_limits<double>::infinity());
  return pareto_frontier(points);
}

std::optional<double> spearman(const std::vector<double>& a, const std::vector<double>& b) {
  TP_ASSERT(a.size() == b.size());
  const size_t n = a.size();
  if (n < 2) return std::nullopt;
  auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && v[idx[j + 1]] == v[idx[i]]) ++j;
      const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = avg;
      i = j + 1;
    }
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  // Pearson correlation of the ranks (exact with ties).
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / static_cast<double>(n);
  const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / static_cast<double>(n);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  if (saa == 0 || sbb == 0) return std::nullopt;
  return sab / std::sqrt(saa * sbb);
}

Explanation explain(const Candidate& w, const Candidate& r) {
  Explanation e;
  auto row = [&](std::string what, double a, double b, std::string unit) { e.rows.push_back({std::move(what), a, b, std::move(unit)}); };
  row("step time (estimate)", w.step.step_time_s, r.step.step_time_s, "s");
  if (w.simulated && r.simulated) row("step time (simulated)", w.simulated->step_time_s, r.simulated->step_time_s, "s");
  row("compute (without recomputation)", w.step.compute_s - w.step.recompute_s, r.step.compute_s - r.step.recompute_s, "s");
  row("recomputation", w.step.recompute_s, r.step.recompute_s, "s");
  row("pipeline bubble", w.step.bubble_s, r.step.bubble_s, "s");
  row("optimizer", w.step.optimizer_s, r.step.optimizer_s, "s");
  row("host (first issue, optimizer sync)", w.step.host_s, r.step.host_s, "s");
  for (auto purpose : plan::kCommPurposes) {
    const double a = w.step.exposed_comm_s(purpose), b = r.step.exposed_comm_s(purpose);
    if (a > 0 || b > 0) row(fmt::format("exposed {} communication", plan::comm_purpose_name(purpose)), a, b, "s");
  }
  row("memory headroom per GPU", w.memory.capacity_bytes - w.memory.total_bytes(), r.memory.capacity_bytes - r.memory.total_bytes(), "B");
  row("steps", w.steps, r.steps, "steps");
  row("time to train", w.objective_time_s, r.objective_time_s, "s");
  if (w.objective_cost_usd && r.objective_cost_usd) row("cost", *w.objective_cost_usd, *r.objective_cost_usd, "USD");

  // Summary: the per-step terms that differ most, scaled to the whole run.
  struct Term {
    std::string what;
    double delta_s;  // runner-up minus winner, whole run
  };
  std::vector<Term> terms;
  for (const auto& x : e.rows) {
    if (x.unit != "s" || x.what.rfind("step time", 0) == 0 || x.what == "time to train") continue;
    terms.push_back({x.what, x.runner_up * r.steps - x.winner * w.steps});
  }
  std::sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) { return std::abs(a.delta_s) > std::abs(b.delta_s); });
  std::string s;
  const double dt = r.objective_time_s - w.objective_time_s;
  if (w.objective_cost_usd && r.objective_cost_usd) {
    s = fmt::format("#1 finishes {} {} and costs {} {} than #2", units::format_duration(std::abs(dt)), dt >= 0 ? "sooner" : "later",
                    units::format_usd(std::abs(*r.objective_cost_usd - *w.objective_cost_usd)),
                    *r.objective_cost_usd >= *w.objective_cost_usd ? "less" : "more");
  } else {
    s = fmt::format("#1 finishes {} {} than #2", units::format_duration(std::abs(dt)), dt >= 0 ? "sooner" : "later");
  }
  if (w.plan.instance_type != r.plan.instance_type || w.plan.instance_count != r.plan.instance_count)
    s += fmt::format(" ({} x {} against {} x {})", w.plan.instance_count, w.plan.instance_type, r.plan.instance_count, r.plan.instance_type);
  std::vector<std::string> parts;
  for (size_t i = 0; i < terms.size() && parts.size() < 3; ++i) {
    if (std::abs(terms[i].delta_s) < 1e-9 * std::max(1.0, std::abs(dt))) break;
    parts.push_back(fmt::format("{} {} by {}", terms[i].what, terms[i].delta_s > 0 ? "saves" : "costs",
                                units::format_duration(std::abs(terms[i].delta_s))));
  }
  if (w.steps != r.steps) parts.push_back(fmt::format("{:.0f} against {:.0f} steps (global batch {} against {})", w.steps, r.steps,
                                                      w.plan.global_batch, r.plan.global_batch));
  if (!parts.empty()) {
    s += ": over the run, ";
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
  }
  const double ha = w.memory.capacity_bytes - w.memory.total_bytes(), hb = r.memory.capacity_bytes - r.memory.total_bytes();
  s += fmt::format(". Memory headroom per GPU: {} against {}.", units::format_bytes(ha), units::format_bytes(hb));
  e.summary = s;
  return e;
}

}  // namespace trainplan::planner
