// Collective algorithms as phases of equal-sized flows over the topology's routes.
#include "trainplan/simulator/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "trainplan/core/error.hpp"

namespace trainplan::sim {
namespace {

using Kind = plan::CollectiveKind;

// Accumulates the flows of one phase (possibly of several group copies), then merges the
// per-link multiplicities and derives the phase's latency and uncontended rate.
class PhaseBuilder {
 public:
  PhaseBuilder(const Topology& topology, double bytes_factor, int steps)
      : topology_(topology), bytes_factor_(bytes_factor), steps_(steps), count_(topology.links().size(), 0) {}

  void flow(int src, int dst) {
    if (src == dst) return;
    flows_.push_back({src, dst});
    const auto& route = topology_.route(src, dst);
    double latency = 0;
    for (int l : route) {
      if (count_[static_cast<size_t>(l)]++ == 0) touched_.push_back(l);
      latency += topology_.links()[static_cast<size_t>(l)].latency_s;
    }
    max_latency_ = std::max(max_latency_, latency);
  }

  CommPhase finish() {
    CommPhase p;
    p.flows = std::move(flows_);
    p.bytes_factor = bytes_factor_;
    p.latency_s = steps_ * max_latency_;
    std::sort(touched_.begin(), touched_.end());  // ascending links: deterministic uses
    for (int link : touched_) {
      const int32_t mult = count_[static_cast<size_t>(link)];
      p.uses.push_back({link, mult});
      double rate = topology_.links()[static_cast<size_t>(link)].bandwidth_bytes_per_s / mult;
      p.uncontended_rate_bytes_per_s = std::min(p.uncontended_rate_bytes_per_s, rate);
    }
    return p;
  }

 private:
  const Topology& topology_;
  double bytes_factor_;
  int steps_;
  std::vector<FlowEnds> flows_;
  std::vector<int32_t> count_;  // link -> flows crossing it
  std::vector<int> touched_;     // links with a non-zero count
  double max_latency_ = 0;
};

void ring_edges(PhaseBuilder& b, const std::vector<int>& ring) {
  const size_t n = ring.size();
  if (n < 2) return;
  for (size_t i = 0; i < n; ++i) b.flow(ring[i], ring[(i + 1) % n]);
}

void all_pairs(PhaseBuilder& b, const std::vector<int>& g) {
  for (int src : g)
    for (int dst : g) b.flow(src, dst);
}

int tree_height(const std::vector<int>& parent) {
  int height = 0;
  for (size_t i = 0; i < parent.size(); ++i) {
    int depth = 0;
    for (int p = parent[i]; p >= 0; p = parent[static_cast<size_t>(p)]) ++depth;
    height = std::max(height, depth);
  }
  return height;
}

// Splits a group (ring order) by node: the node groups in order of first appearance, and
// whether every node holds the same number of members.
std::vector<std::vector<int>> split_by_node(const std::vector<int>& ring, const Topology& topology) {
  std::vector<std::vector<int>> nodes;
  std::map<int, size_t> index;
  for (int g : ring) {
    auto [it, inserted] = index.emplace(topology.node_of(g), nodes.size());
    if (inserted) nodes.emplace_back();
    nodes[it->second].push_back(g);
  }
  return nodes;
}

bool hierarchical_applies(const std::vector<int>& gpus, const Topology& topology) {
  auto nodes = split_by_node(gpus, topology);
  if (nodes.size() < 2 || nodes[0].size() < 2) return false;
  for (const auto& n : nodes)
    if (n.size() != nodes[0].size()) return false;
  return true;
}

// Channels of a ring over `gpus`: the members per node when the group spans several nodes
// with the same number (>= 2) on each and each node's members are contiguous in the ring;
// otherwise 1.
int ring_channels(const std::vector<int>& ring, const Topology& topology) {
  if (!hierarchical_applies(ring, topology)) return 1;
  int changes = 0;
  for (size_t i = 1; i < ring.size(); ++i) changes += topology.node_of(ring[i]) != topology.node_of(ring[i - 1]) ? 1 : 0;
  const auto nodes = split_by_node(ring, topology);
  if (changes != static_cast<int>(nodes.size()) - 1) return 1;
  return static_cast<int>(nodes[0].size());
}

// Per-kind phase builders over all copies. `each` is called once per copy and phase index.
template <typename Fn>
void add_phase(CommPattern& p, const Topology& topology, double factor, int steps,
               const std::vector<std::vector<int>>& groups, Fn each) {
  PhaseBuilder b(topology, factor, steps);
  for (const auto& g : groups) each(b, g);
  p.phases.push_back(b.finish());
}

}  // namespace

std::string_view collective_algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
    case CollectiveAlgorithm::hierarchical: return "hierarchical";
    case CollectiveAlgorithm::parameter_server: return "parameter-server";
    case CollectiveAlgorithm::automatic: return "auto";
  }
  return "?";
}

CollectiveAlgorithm parse_collective_algorithm(std::string_view name) {
  for (auto a : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree, CollectiveAlgorithm::hierarchical,
                 CollectiveAlgorithm::parameter_server, CollectiveAlgorithm::automatic})
    if (collective_algorithm_name(a) == name) return a;
  throw Error("unknown collective algorithm \"" + std::string(name) + "\"")
      .hint("one of ring, tree, hierarchical, parameter-server, auto");
}

CollectiveAlgorithm from_dp_algorithm(plan::DpAlgorithm a) {
  switch (a) {
    case plan::DpAlgorithm::ring: return CollectiveAlgorithm::ring;
    case plan::DpAlgorithm::tree: return CollectiveAlgorithm::tree;
    case plan::DpAlgorithm::hierarchical: return CollectiveAlgorithm::hierarchical;
    case plan::DpAlgorithm::parameter_server: return CollectiveAlgorithm::parameter_server;
  }
  return CollectiveAlgorithm::ring;
}

double CommPattern::uncontended_time_s(double size_bytes) const {
  double t = 0;
  for (const CommPhase& p : phases) {
    t += p.latency_s;
    const double bytes = p.bytes_factor * size_bytes;
    if (bytes > 0 && !p.uses.empty()) t += bytes / p.uncontended_rate_bytes_per_s;
  }
  return t;
}

double bus_bandwidth_factor(plan::CollectiveKind kind, int n) {
  if (n < 1) return 0;
  const double nn = n;
  switch (kind) {
    case Kind::all_reduce: return 2.0 * (nn - 1) / nn;
    case Kind::reduce_scatter:
    case Kind::all_gather:
    case Kind::all_to_all: return (nn - 1) / nn;
    default: return 1.0;
  }
}

std::vector<std::vector<int>> double_binary_tree(int n) {
  std::vector<std::vector<int>> trees(2, std::vector<int>(static_cast<size_t>(std::max(n, 0)), -1));
  // Balanced in-order tree over [lo, hi): root = middle; children = middles of the halves.
  struct Builder {
    std::vector<int>& parent;
    int build(int lo, int hi, int par) {
      if (lo >= hi) return -1;
      int mid = lo + (hi - lo) / 2;
      parent[static_cast<size_t>(mid)] = par;
      build(lo, mid, mid);
      build(mid + 1, hi, mid);
      return mid;
    }
  };
  Builder{trees[0]}.build(0, n, -1);
  for (int i = 0; i < n; ++i) {
    // Tree 1 = tree 0 with every position shifted by one: position i plays (i - 1 mod n).
    int base = (i - 1 + n) % n;
    int p = trees[0][static_cast<size_t>(base)];
    trees[1][static_cast<size_t>(i)] = p < 0 ? -1 : (p + 1) % n;
  }
  return trees;
}

CollectiveAlgorithm effective_algorithm(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                                        const std::vector<int>& group_gpus, const Topology& topology) {
  TP_ASSERT(requested != CollectiveAlgorithm::automatic);
  const bool reduce_like = kind == Kind::all_reduce || kind == Kind::barrier;
  switch (requested) {
    case CollectiveAlgorithm::tree:
      return reduce_like && group_gpus.size() > 2 ? CollectiveAlgorithm::tree : CollectiveAlgorithm::ring;
    case CollectiveAlgorithm::hierarchical:
      if (!(reduce_like || kind == Kind::reduce_scatter || kind == Kind::all_gather)) return CollectiveAlgorithm::ring;
      return hierarchical_applies(group_gpus, topology) ? CollectiveAlgorithm::hierarchical : CollectiveAlgorithm::ring;
    case CollectiveAlgorithm::parameter_server:
      return reduce_like || kind == Kind::reduce_scatter || kind == Kind::all_gather ? CollectiveAlgorithm::parameter_server
                                                                                    : CollectiveAlgorithm::ring;
    default: return CollectiveAlgorithm::ring;
  }
}

CommPattern build_pattern(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                          const std::vector<std::vector<int>>& groups, const Topology& topology) {
  TP_ASSERT(!groups.empty());
  const int n = static_cast<int>(groups[0].size());
  for (const auto& g : groups) TP_ASSERT(static_cast<int>(g.size()) == n);
  CommPattern p;
  p.algorithm = effective_algorithm(kind, requested, groups[0], topology);
  if (n < 2) return p;  // nothing moves
  const double nn = n;
  const bool reduce_like = kind == Kind::all_reduce || kind == Kind::barrier;

  switch (kind) {
    case Kind::all_to_all:
      add_phase(p, topology, 1.0 / nn, 1, groups, all_pairs);
      return p;
    case Kind::broadcast:
    case Kind::reduce:
      // Pipelined chain along the ring from (broadcast) / to (reduce) the first member.
      add_phase(p, topology, 1.0, n - 1, groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (size_t i = 0; i + 1 < g.size(); ++i) {
          if (kind == Kind::broadcast)
            b.flow(g[i], g[i + 1]);
          else
            b.flow(g[i + 1], g[i]);
        }
      });
      return p;
    default: break;
  }

  switch (p.algorithm) {
    case CollectiveAlgorithm::ring: {
      // A ring spanning nodes runs as k channels (k = members per node), each entering and
      // leaving every node through a different member, as NCCL's multi-ring layout does, so
      // the traffic spreads over all the node's NICs; each channel carries S/k.
      const int channels = ring_channels(groups[0], topology);
      const double factor = (reduce_like ? 2.0 * (nn - 1) / nn : (nn - 1) / nn) / channels;
      const int steps = reduce_like ? 2 * (n - 1) : n - 1;
      add_phase(p, topology, factor, steps, groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
        if (channels == 1) return ring_edges(b, g);
        const auto nodes = split_by_node(g, topology);
        for (int c = 0; c < channels; ++c) {
          std::vector<int> ring;
          for (const auto& node : nodes)
            for (size_t i = 0; i < node.size(); ++i) ring.push_back(node[(i + static_cast<size_t>(c)) % node.size()]);
          ring_edges(b, ring);
        }
      });
      return p;
    }
    case CollectiveAlgorithm::tree: {
      const auto trees = double_binary_tree(n);
      const int height = std::max(tree_height(trees[0]), tree_height(trees[1]));
      add_phase(p, topology, 0.5, 2 * height, groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (const auto& parent : trees)
          for (size_t i = 0; i < g.size(); ++i) {
            int par = parent[i];
            if (par < 0) continue;
            b.flow(g[i], g[static_cast<size_t>(par)]);  // reduce, up
            b.flow(g[static_cast<size_t>(par)], g[i]);  // broadcast, down
          }
      });
      return p;
    }
    case CollectiveAlgorithm::hierarchical: {
      const auto nodes0 = split_by_node(groups[0], topology);
      const double k = static_cast<double>(nodes0[0].size());
      const double num_nodes = static_cast<double>(nodes0.size());
      const int ki = static_cast<int>(nodes0[0].size());
      const int ni = static_cast<int>(nodes0.size());
      auto intra = [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (const auto& node : split_by_node(g, topology)) ring_edges(b, node);
      };
      auto inter = [&](PhaseBuilder& b, const std::vector<int>& g) {
        auto nodes = split_by_node(g, topology);
        for (size_t j = 0; j < nodes[0].size(); ++j) {
          std::vector<int> ring;
          for (const auto& node : nodes) ring.push_back(node[j]);
          ring_edges(b, ring);
        }
      };
      const double intra_factor = (k - 1) / k;
      if (reduce_like) {
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
        add_phase(p, topology, 2.0 * (num_nodes - 1) / num_nodes / k, 2 * (ni - 1), groups, inter);
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
      } else if (kind == Kind::reduce_scatter) {
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
        add_phase(p, topology, (num_nodes - 1) / num_nodes / k, ni - 1, groups, inter);
      } else {  // all_gather
        add_phase(p, topology, (num_nodes - 1) / num_nodes / k, ni - 1, groups, inter);
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
      }
      return p;
    }
    case CollectiveAlgorithm::parameter_server: {
      // Each rank serves 1/n of the buffer: push sends every shard to its server, pull
      // fetches the updated shards back.
      if (reduce_like || kind == Kind::reduce_scatter) add_phase(p, topology, 1.0 / nn, 1, groups, all_pairs);
      if (reduce_like || kind == Kind::all_gather) add_phase(p, topology, 1.0 / nn, 1, groups, all_pairs);
      return p;
    }
    case CollectiveAlgorithm::automatic: break;
  }
  TP_ASSERT_MSG(false, "unhandled collective algorithm");
  return p;
}

CommPattern build_p2p_pattern(const std::vector<FlowEnds>& pairs, const Topology& topology) {
  CommPattern p;
  PhaseBuilder b(topology, 1.0, 1);
  for (const FlowEnds& f : pairs) b.flow(f.src_gpu, f.dst_gpu);
  p.phases.push_back(b.finish());
  return p;
}

}  // namespace trainplan::sim
