// File: trainplan/simulator/collectives.hpp
//
// Collectives decomposed into the phases of their algorithm. A phase is a set of equal-sized
// flows (GPU -> GPU over the topology's routes) that advance together, plus the latency of its
// steps; the simulator runs the phases one after the other on the flow network. S below is
// the task's `bytes` (the nccl-tests "size": the full buffer per rank), n the group size.
//
//   algorithm     kind            phases (flows per phase, bytes per flow, latency steps)
//   ring          all_reduce      1: n ring edges, 2(n-1)/n * S, 2(n-1) steps
//   ring          reduce_scatter  1: n ring edges, (n-1)/n * S, n-1 steps      (all_gather alike)
//   tree          all_reduce      1: double binary tree, reduce up + broadcast down pipelined:
//                                    every tree edge both ways, S/2 per flow, 2*height steps;
//                                    across nodes of k >= 2 GPUs NCCL's node-aware tree: k
//                                    channels of S/k, each a chain inside every node from its
//                                    head (member c) and one tree of the double tree between
//                                    nodes (parent and first child on member c, second child on
//                                    member c + 1): every GPU's NIC carries 2 S/k each way
//   hierarchical  all_reduce      3: intra-node ring reduce-scatter (k per node), inter-node
//                                    ring all-reduce of S/k among same-local-index GPUs,
//                                    intra-node ring all-gather
//   hierarchical  reduce_scatter  2: intra-node RS, inter-node RS of S/k  (all_gather: reverse)
//   parameter_server all_reduce   2: TensorFlow parameter server, one server on the host (CPUs)
//                                    of every node the group spans, each holding 1/N of the
//                                    variables: push (every GPU -> every host, S/N), pull
//                                    (every host -> every GPU, S/N)   (RS: push; AG: pull)
//   smddp         all_reduce      4: SageMaker data parallel (Herring): intra-node ring
//                                    reduce-scatter, push (every GPU's S/k shard split over the
//                                    N nodes' servers: GPU -> host, S/(kN)), pull (host -> GPU,
//                                    S/(kN)), intra-node ring all-gather (k = GPUs per node)
//   horovod       all_reduce      as ring, started half a Horovod cycle late (the wait for the
//                                    background thread's next tick)
//   nvls_tree     all_reduce      1: NCCL's NVLSTree (NVSwitch-3 nodes, sm_90+, >= 2 nodes, k
//                                    GPUs on each): in-node NVLS reduce / multicast pipelined
//                                    with a double binary tree between nodes, every GPU the head
//                                    of 1/k of the data on its own NIC. One coflow of S/(2k) per
//                                    flow: in-node every ordered pair 4 times (each GPU moves
//                                    2(k-1)/k * S over NVLink, as the single-node all-reduce at
//                                    the NVLS link rate), between nodes every edge of both trees
//                                    up and down among same-local-index GPUs (a GPU of a 2-node
//                                    group sends S/k over the network: busbw may exceed the
//                                    NICs'). NCCL latency: 25 us + 2 log2(N) x 14 us, Simple only
//   any           all_to_all      1: every pair, S/n, 1 step
//   any           broadcast       1: chain from the first group member along the ring, S per
//                                    flow, n-1 steps (reduce: the chain reversed)
//   any           barrier         as all_reduce of S (usually 0 bytes: latency only)
//
// A ring that spans several nodes, with k >= 2 members on each (contiguous in ring order),
// runs as k channels carrying S/k each: channel c rotates every node's members by c, so each
// channel enters and leaves a node through a different GPU and the traffic spreads over all
// the node's NICs (NCCL's multi-ring layout); bytes per rank and step counts are unchanged.
// A step's latency is the largest route latency among the phase's flows. Uncontended, ring
// all-reduce over links of bandwidth B and hop latency L takes 2(n-1)/n * S/B + 2(n-1)L.
//
//   sim::CommPattern p = sim::build_pattern(plan::CollectiveKind::all_reduce,
//                                           sim::CollectiveAlgorithm::ring, {ring_gpus}, topo);
//   p.uncontended_time_s(64e6);
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/network.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::hw {
class Cluster;
}

namespace trainplan::sim {

enum class CollectiveAlgorithm {
  ring,
  tree,              // double binary tree (all_reduce only; other kinds use ring)
  hierarchical,      // intra-node / inter-node / intra-node
  parameter_server,  // one server per node on its host: push then pull
  automatic,         // the lowest uncontended time of automatic_candidates() (NCCL's tuner)
  smddp,             // intra-node RS, push to / pull from every node's host servers, intra-node AG
  horovod,           // ring, after the wait for Horovod's cycle
  nvls_tree,         // NCCL's NVLSTree: NVLS inside NVSwitch-3 nodes, tree between nodes (all_reduce)
};

/// Horovod's default cycle time (HOROVOD_CYCLE_TIME): its background thread negotiates and
/// fuses the tensors ready at each tick. 1 ms since Horovod's parameter_manager (0.19+),
/// horovod/common/operations.cc `SetCycleTimeMs(1)`; 5 ms before (0.16-0.18 param_manager).
/// A fused buffer waits for the next tick: half a cycle on average.
inline constexpr double kHorovodCycleTimeS = 1e-3;
/// Horovod's default fusion threshold (HOROVOD_FUSION_THRESHOLD): 64 MiB, docs/tensor-fusion.rst.
inline constexpr double kHorovodFusionThresholdBytes = 64.0 * 1024 * 1024;
std::string_view collective_algorithm_name(CollectiveAlgorithm a);
/// "ring", "tree", "hierarchical", "parameter-server", "auto", "smddp", "horovod", "nvls-tree";
/// Error otherwise.
CollectiveAlgorithm parse_collective_algorithm(std::string_view name);
CollectiveAlgorithm from_dp_algorithm(plan::DpAlgorithm a);

/// The GPUs a flow leaves and reaches (for byte accounting); -1 for a host end (parameter servers).
struct FlowEnds {
  int src_gpu = 0;
  int dst_gpu = 0;
};

/// NCCL's protocols: LL (8-byte stores carrying 4 bytes and a flag: lowest latency), LL128
/// (128-byte lines carrying 120 bytes; NVLink only), Simple (bulk copies with a fence per step).
enum class NcclProtocol : uint8_t { ll, ll128, simple };
inline constexpr int kNumNcclProtocols = 3;

struct CommPhase {
  std::vector<LinkUse> uses;   // links with the number of the phase's flows crossing each
  std::vector<FlowEnds> flows; // for byte accounting (sent by src, received by dst)
  double bytes_factor = 0;     // bytes per flow = bytes_factor * S
  double latency_s = 0;        // all the phase's steps together (per-hop link latency model)
  /// Rate of every flow when nothing else uses the links: min over uses of bw / multiplicity.
  double uncontended_rate_bytes_per_s = std::numeric_limits<double>::infinity();
  /// NCCL latency model: the phase's latency per protocol (the collective's base latency is in
  /// phase 0). Used instead of latency_s when CommPattern::nccl is set.
  std::array<double, kNumNcclProtocols> nccl_latency_s{};
};

/// How NCCL times a collective (src/graph/tuning.cc; constants and sources in
/// simulator/README.md, "NCCL model"): per protocol, a base latency plus a per-step latency by
/// link class (NVLink, PCIe, network) for the steps of the algorithm, and a share of the link
/// bandwidth; NCCL runs the protocol with the lowest predicted time for the message size.
/// Applies to ring, tree and hierarchical (ring-based) collectives over a ClusterTopology;
/// hand-built topologies (LinkClass::other), all-to-all, the parameter server and p2p keep
/// the per-hop link latency model.
struct NcclTiming {
  std::array<double, kNumNcclProtocols> bandwidth_share{};  // 0: protocol not enabled
  bool tree = false;           // tree all-reduce bandwidth correction by message size
  bool ring_plateau = false;   // ring Simple all-reduce across nodes: latency x plateau_factor
  double plateau_factor = 1.4; // 1.9 before sm_80
  int ranks = 0;
  int channels = 1;            // the ring's channels (GPUs per node)
  /// Thread blocks NCCL's kernel holds on each member GPU while the collective runs (one per
  /// NCCL channel: Topology::NcclHost, nccl_channels()); compute overlapping it runs on the
  /// other SMs (ComputeModel::sm_share_slowdown). 0 outside the NCCL model.
  int sm_channels = 0;
};

struct CommPattern {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  std::vector<CommPhase> phases;
  bool nccl = false;  // timed by the NCCL model below (else per-hop link latencies)
  NcclTiming timing;
  /// Wait before the first phase (Horovod: half a cycle), on top of any launch cost.
  double start_delay_s = 0;
  /// The protocol NCCL picks for `size_bytes`: the lowest uncontended time (Simple when the
  /// NCCL model does not apply).
  NcclProtocol protocol_for(double size_bytes) const;
  /// Latency of `phase` under protocol `p` for a message of `size_bytes`.
  double phase_latency_s(int phase, NcclProtocol p, double size_bytes) const;
  /// Share of the links' bandwidth the payload gets under `p` (1 without the NCCL model).
  double bandwidth_share(NcclProtocol p, double size_bytes) const;
  /// Time with no other traffic under the protocol NCCL picks: sum over phases of latency +
  /// bytes per flow / (rate x share).
  double uncontended_time_s(double size_bytes) const;
  double uncontended_time_s(double size_bytes, NcclProtocol p) const;
};

/// NCCL's Simple-protocol ring latencies (the NCCL model above), for closed-form estimates:
/// a ring collective of s steps, i of them over the network, takes base + (s - i) x intra +
/// i x inter, times plateau for all-reduces across nodes. `net_latency_s`: the latency the
/// network plugin reports (Topology::NcclHost::net_latency_s), in each network step twice.
struct NcclRingLatency {
  double base_s = 0;
  double intra_step_s = 0;
  double inter_step_s = 0;
  double plateau = 1.0;
};
NcclRingLatency nccl_ring_simple_latency(bool pcie_intra, int nodes, bool amd_cpu, int compute_capability,
                                         double net_latency_s = 0);

/// Fraction of an NVLink's per-direction signalling rate that NCCL's kernels move: NCCL's
/// per-link NVLink bandwidth (topo.h: 20.0 GB/s for sm_70/sm_80, 12.0 sm_86, 20.6 sm_90, 40.1
/// sm_100) over the link's rate (25 GB/s NVLink 2-4, 14.06 GA10x NVLink 3, 50 NVLink 5).
/// On Hopper and later behind NVSwitch, NCCL reduces in the switch (NVLS) and reaches the
/// full link rate: 1. An empty compute capability (an accelerator without CUDA: Trainium's
/// NeuronLink, modelled as NVSwitch links) also gives 1.
double nccl_nvlink_share(const std::string& compute_capability, bool nvswitch);

/// NCCL channels of a ring or tree collective (each one thread block resident on an SM of every
/// member GPU for the whole collective), as NCCL's topology search sets them up (constants and
/// sources in simulator/README.md, "Overlap: NCCL's SMs"): inside a node by the intra-node
/// fabric (NVSwitch 24, NVLink mesh 12, PCIe 2), across nodes two per NIC the node's GPUs use
/// (at most one NIC per GPU), never more than inside the node. Large messages use them all;
/// NCCL's runtime reduction of channels for small messages is not modelled.
int nccl_channels(hw::IntraNodeKind intra, int gpus_per_node, int nics_per_node, bool across_nodes);
/// The same for a catalog cluster's instance; 0 on accelerators without CUDA (Trainium).
int nccl_channels(const hw::Cluster& cluster, bool across_nodes);

/// The rings NCCL runs a ring collective over `order` as (`member_nodes[i]` is the node of
/// order[i]): when the ring spans several nodes with the same number k >= 2 of members on each,
/// each node's members contiguous, k channels, channel c entering and leaving every node
/// through a different member (the node's members rotated by c), so the traffic spreads over
/// all the node's NICs and each channel carries 1/k of the bytes; otherwise the one ring.
/// build_pattern lays rings out this way, and the planner's analytical estimate reads it.
std::vector<std::vector<int>> channel_rings(const std::vector<int>& order, const std::vector<int>& member_nodes);

/// The phases of one collective. `groups` holds one or more copies of the group (GPU ids, each
/// copy already in ring order); copies run together as one pattern (symmetric simulation
/// merges the copies of a collective that renamed ranks run at the same time). `automatic` is
/// not accepted here (see choose_algorithm).
CommPattern build_pattern(plan::CollectiveKind kind, CollectiveAlgorithm algorithm,
                          const std::vector<std::vector<int>>& groups, const Topology& topology);

/// A point-to-point transfer of S bytes for each (src, dst) pair, as one phase.
CommPattern build_p2p_pattern(const std::vector<FlowEnds>& pairs, const Topology& topology);

/// The algorithm actually used for a kind: tree applies to all_reduce (and barrier) only,
/// hierarchical falls back to ring when the group has one node, one GPU per node or unequal
/// GPUs per node; other kinds than all_reduce/reduce_scatter/all_gather ignore the choice.
CollectiveAlgorithm effective_algorithm(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                                        const std::vector<int>& group_gpus, const Topology& topology);

/// The algorithms `automatic` chooses among for `kind` on `group_gpus` (ring order), as NCCL's
/// tuner does (src/graph/tuning.cc: the lowest predicted time over algorithm x protocol):
/// ring and tree, plus NVLSTree for an all-reduce over exactly 2 nodes of NVSwitch-3 GPUs
/// (Topology::NcclHost::nvls) with the same number (>= 2) on each. Beyond 2 nodes NVLSTree is
/// left out: NCCL models its bandwidth there as half the network's (bwInter / 2), below the
/// ring's, and NVLS gives no gain beyond 2 nodes on 8 x 400G H100 nodes (NVIDIA/nccl#1221);
/// its small-message latency advantage there is not modelled (simulator/README.md).
std::vector<CollectiveAlgorithm> automatic_candidates(plan::CollectiveKind kind, const std::vector<int>& group_gpus,
                                                      const Topology& topology);

/// nccl-tests bus bandwidth factor: busbw = algbw * factor, algbw = S / time.
/// all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; others 1.
double bus_bandwidth_factor(plan::CollectiveKind kind, int n);

/// Double binary tree over positions 0..n-1 as NCCL builds it (graph/trees.cc): parent[t][i] =
/// parent position of i in tree t (-1 for the root). Tree 0: root 0, odd positions the leaves;
/// tree 1 its mirror (even n) or its shift by one (odd n), so every position is inner in at most
/// one tree (position 0 of an odd n in both, with one child in each): no position has more than
/// four tree edges, the same network load as a ring.
std::vector<std::vector<int>> double_binary_tree(int n);

}  // namespace trainplan::sim
