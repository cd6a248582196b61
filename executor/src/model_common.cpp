#include "model_common.hpp"

#include <fmt/format.h>

#include "trainplan/core/error.hpp"

namespace trainplan::executor::detail {

double mean_loss(Backend& backend, Stream& stream, const Tensor& losses) {
  std::vector<double> values = backend.download_values(stream, losses);
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

void check_ids(std::span<const int32_t> ids, int64_t count, int64_t limit, std::string_view what) {
  if (static_cast<int64_t>(ids.size()) != count)
    throw Error(fmt::format("{}: expected {} ids, got {}", what, count, ids.size()));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= limit)
      throw Error(fmt::format("{}: id {} at index {} is outside [0, {})", what, ids[i], i, limit));
}

}  // namespace trainplan::executor::detail
