// Pieces shared by the executor's reference models (gpt.cpp, mlp.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "trainplan/executor/backend.hpp"

namespace trainplan::executor::detail {

/// Mean of a losses tensor (one value per row), summed on the host in double, in row order.
double mean_loss(Backend& backend, Stream& stream, const Tensor& losses);

/// Throws Error unless ids has `count` entries, each in [0, limit).
void check_ids(std::span<const int32_t> ids, int64_t count, int64_t limit, std::string_view what);

}  // namespace trainplan::executor::detail
