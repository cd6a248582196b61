// EC2 Capacity Blocks for ML: reserved hours and cost (see capacity_block.hpp).
#include "trainplan/hwprofiles/capacity_block.hpp"

#include <cmath>

#include "trainplan/core/error.hpp"

namespace trainplan::hw {

namespace {
// Rounds `hours` up to a multiple of `step` hours, tolerating float noise just above a multiple.
double round_up(double hours, double step) { return std::ceil(hours / step - 1e-9) * step; }
}  // namespace

double capacity_block_reserved_hours(double job_hours, const CapacityBlockRules& rules) {
  TP_ASSERT(job_hours > 0 && std::isfinite(job_hours));
  const double day = 24.0, week = 7 * day;
  const double longest = rules.week_steps_up_to_days * day;
  const double full = std::floor(job_hours / longest - 1e-9);  // consecutive blocks of the longest length
  double rest = job_hours - full * longest;
  if (rest <= 0) return full * longest;
  rest = rest <= rules.day_steps_up_to_days * day ? round_up(rest, day) : round_up(rest, week);
  return full * longest + rest;
}

CapacityBlockCost capacity_block_cost(const CapacityBlockOffer& offer, const CapacityBlockRules& rules, int instances,
                                      double job_hours) {
  TP_ASSERT(instances >= 1);
  CapacityBlockCost c;
  c.reserved_hours = capacity_block_reserved_hours(job_hours, rules);
  c.blocks_in_parallel = (instances + rules.max_instances_per_block - 1) / rules.max_instances_per_block;
  c.blocks_in_sequence = static_cast<int>(std::ceil(c.reserved_hours / (rules.week_steps_up_to_days * 24.0) - 1e-9));
  c.usd = instances * c.reserved_hours * offer.usd_per_instance_hour;
  return c;
}

}  // namespace trainplan::hw
