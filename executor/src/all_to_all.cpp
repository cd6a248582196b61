// Communicator::start_all_to_all_v's default (communicator.hpp): the chunks for the other
// members go out as eager sends, theirs come in as receives, and the member's own chunk is
// copied on the host; the returned request completes when every receive has.
#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "collective_math.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/communicator.hpp"

namespace trainplan::executor {
namespace {

class AllToAllRequest final : public CommRequest {
 public:
  AllToAllRequest(std::vector<std::shared_ptr<CommRequest>> parts, std::string what, double started_s)
      : parts_(std::move(parts)), what_(std::move(what)), started_s_(started_s) {}
  bool test() override {
    for (const auto& p : parts_)
      if (!p->test()) return false;
    return true;
  }
  void wait() override {
    for (const auto& p : parts_) p->wait();
  }
  double completed_at_s() const override {
    double t = started_s_;
    for (const auto& p : parts_) t = std::max(t, p->completed_at_s());
    return t;
  }
  std::string describe() const override { return what_; }

 private:
  std::vector<std::shared_ptr<CommRequest>> parts_;
  std::string what_;
  double started_s_;
};

}  // namespace

std::shared_ptr<CommRequest> Communicator::start_all_to_all_v(const CommGroup& group, int64_t tag, const Tensor& out,
                                                              std::span<const int64_t> out_counts, const Tensor& in,
                                                              std::span<const int64_t> in_counts) {
  const std::string what = fmt::format("all_to_all_v tag {} on {}", tag, group.describe());
  const int me = group.index_of(rank());
  if (me < 0) throw Error(fmt::format("rank {}: {}: this rank is not a member", rank(), what));
  const auto n = static_cast<size_t>(group.size());
  if (out_counts.size() != n || in_counts.size() != n)
    throw Error(fmt::format("rank {}: {}: {} send counts and {} receive counts for {} members", rank(), what,
                            in_counts.size(), out_counts.size(), n));
  for (size_t i = 0; i < n; ++i)
    if (in_counts[i] < 0 || out_counts[i] < 0)
      throw Error(fmt::format("rank {}: {}: negative count for member {}", rank(), what, i));
  comm::check_host(in, "all_to_all_v", "in", "communicator");
  comm::check_host(out, "all_to_all_v", "out", "communicator");
  const int64_t sent = std::accumulate(in_counts.begin(), in_counts.end(), int64_t{0});
  const int64_t received = std::accumulate(out_counts.begin(), out_counts.end(), int64_t{0});
  if (in.numel() != sent || out.numel() != received)
    throw Error(fmt::format("rank {}: {}: in has {} elements for send counts summing to {}, out {} for receive counts "
                            "summing to {}",
                            rank(), what, in.numel(), sent, out.numel(), received));
  if (in.dtype() != out.dtype())
    throw Error(fmt::format("rank {}: {}: in is {}, out {}", rank(), what, in.describe(), out.describe()));
  if (out.numel() > 0 && in.numel() > 0 && out.overlaps(in))
    throw Error(fmt::format("rank {}: {}: out overlaps in", rank(), what));
  const double start = Backend::now_s();
  const Tensor in_flat = in.view({in.numel()}), out_flat = out.view({out.numel()});
  std::vector<std::shared_ptr<CommRequest>> parts;
  int64_t at = 0;
  for (size_t j = 0; j < n; ++j) {
    if (static_cast<int>(j) != me && in_counts[j] > 0)
      parts.push_back(start_send(group.ranks[j], tag, in_flat.flat(at, at + in_counts[j])));
    at += in_counts[j];
  }
  at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) != me && out_counts[i] > 0)
      parts.push_back(start_recv(group.ranks[i], tag, out_flat.flat(at, at + out_counts[i])));
    at += out_counts[i];
  }
  // The member's own chunk.
  const auto self = static_cast<size_t>(me);
  if (in_counts[self] != out_counts[self])
    throw Error(fmt::format("rank {}: {}: keeps {} elements of its own but expects {}", rank(), what, in_counts[self],
                            out_counts[self]));
  if (in_counts[self] > 0) {
    const int64_t src = std::accumulate(in_counts.begin(), in_counts.begin() + me, int64_t{0});
    const int64_t dst = std::accumulate(out_counts.begin(), out_counts.begin() + me, int64_t{0});
    const Tensor a = in_flat.flat(src, src + in_counts[self]), b = out_flat.flat(dst, dst + out_counts[self]);
    std::memcpy(b.data(), a.data(), a.size_bytes());
  }
  return std::make_shared<AllToAllRequest>(std::move(parts), what, start);
}

}  // namespace trainplan::executor
