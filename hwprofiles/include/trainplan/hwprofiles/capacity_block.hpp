// File: trainplan/hwprofiles/capacity_block.hpp
//
// EC2 Capacity Blocks for ML: a reservation of n instances of one type for a fixed span of days,
// paid up front when it is bought, at a published price per instance-hour per region. The
// pricing model (EC2 User Guide, "Find and purchase Capacity Blocks"): durations in 1-day steps
// up to 14 days and in 7-day steps up to 182 days; up to 64 instances per block; a start up to
// 8 weeks ahead. The catalog holds the rules and the offers (catalog/capacity_blocks.json).
//
//   const hw::Catalog& cat = hw::Catalog::builtin();
//   const hw::CapacityBlockOffer* o = cat.capacity_block_offer("p5.48xlarge", "us-east-1");
//   auto cost = hw::capacity_block_cost(*o, cat.capacity_block_rules(), 4, 50.0);
//   // 50 h -> 3 days = 72 reserved hours: 4 x 72 x 39.33 USD, paid up front
#pragma once

#include <optional>
#include <string>

namespace trainplan::hw {

/// The reservation rules of Capacity Blocks.
struct CapacityBlockRules {
  int day_steps_up_to_days = 14;      // 1-day increments up to this many days
  int week_steps_up_to_days = 182;    // then 7-day increments up to this many days (one block)
  int max_instances_per_block = 64;   // more instances take several blocks
  int max_start_lead_days = 56;       // a block can start at most this far ahead
  std::string source;                 // source id
};

/// A published Capacity Block price: USD per instance-hour of the reservation, one region.
struct CapacityBlockOffer {
  std::string instance_type;
  std::string region;
  double usd_per_instance_hour = 0;
  std::string source;  // source id
};

/// What a job of `job_hours` on `instances` instances reserves and pays.
struct CapacityBlockCost {
  double reserved_hours = 0;  // per block sequence: whole days (<= 14 d), whole weeks beyond
  int blocks_in_parallel = 1; // ceil(instances / max_instances_per_block)
  int blocks_in_sequence = 1; // a job longer than the longest block takes consecutive ones
  double usd = 0;             // instances x reserved_hours x price, paid up front
};

/// Hours reserved for a job of `job_hours` (> 0): rounded up to whole days up to
/// day_steps_up_to_days, to whole weeks beyond; a job longer than week_steps_up_to_days takes
/// consecutive blocks of that length and a last block rounded the same way.
double capacity_block_reserved_hours(double job_hours, const CapacityBlockRules& rules);

/// The cost of reserving `instances` (>= 1) for `job_hours` (> 0) at `offer`'s price.
CapacityBlockCost capacity_block_cost(const CapacityBlockOffer& offer, const CapacityBlockRules& rules, int instances,
                                      double job_hours);

}  // namespace trainplan::hw
