// ModelGraph: the op list, units and a Boost.Graph of data dependencies.
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "internal.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::models {

// Vertex i is op i; an edge u -> v means v reads u's output.
using DependencyGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

struct ModelGraph::Impl {
  ModelSpec spec;
  std::vector<Op> ops;
  std::vector<Unit> units;
  std::vector<std::pair<int, int>> edges;
  DependencyGraph graph;
};

ModelGraph::ModelGraph(ModelSpec spec, std::vector<Op> ops, std::vector<Unit> units,
                       std::vector<std::pair<int, int>> edges) {
  auto impl = std::make_shared<Impl>();
  impl->spec = std::move(spec);
  impl->ops = std::move(ops);
  impl->units = std::move(units);
  impl->edges = std::move(edges);
  const int n = static_cast<int>(impl->ops.size());
  for (int i = 0; i < n; ++i) TP_ASSERT_MSG(impl->ops[i].id == i, "op ids must equal their index");
  impl->graph = DependencyGraph(static_cast<size_t>(n));
  for (auto [from, to] : impl->edges) {
    TP_ASSERT(from >= 0 && from < n && to >= 0 && to < n && from != to);
    boost::add_edge(static_cast<size_t>(from), static_cast<size_t>(to), impl->graph);
  }
  impl_ = std::move(impl);
  // The topological sort throws boost::not_a_dag on a cycle: a builder bug.
  try {
    (void)topological_order();
  } catch (const boost::not_a_dag&) {
    TP_ASSERT_MSG(false, "model graph has a cycle");
  }
}

ModelGraph::ModelGraph(ModelGraph&&) noexcept = default;
ModelGraph& ModelGraph::operator=(ModelGraph&&) noexcept = default;
// A graph never changes once built: a copy shares it.
ModelGraph::ModelGraph(const ModelGraph& other) = default;
ModelGraph::~ModelGraph() = default;

const ModelSpec& ModelGraph::spec() const { return impl_->spec; }
const std::vector<Op>& ModelGraph::ops() const { return impl_->ops; }
const std::vector<Unit>& ModelGraph::units() const { return impl_->units; }
const std::vector<std::pair<int, int>>& ModelGraph::edges() const { return impl_->edges; }

std::vector<int> ModelGraph::topological_order() const {
  std::vector<size_t> reversed;
  reversed.reserve(impl_->ops.size());
  boost::topological_sort(impl_->graph, std::back_inserter(reversed));
  return std::vector<int>(reversed.rbegin(), reversed.rend());
}

const Op& ModelGraph::op(int id) const {
  TP_ASSERT(id >= 0 && id < static_cast<int>(impl_->ops.size()));
  return impl_->ops[static_cast<size_t>(id)];
}

const Unit& ModelGraph::unit(int index) const {
  TP_ASSERT(index >= 0 && index < static_cast<int>(impl_->units.size()));
  return impl_->units[static_cast<size_t>(index)];
}

std::vector<int> ModelGraph::consumers(int id) const {
  TP_ASSERT(id >= 0 && id < static_cast<int>(impl_->ops.size()));
  std::vector<int> out;
  auto [begin, end] = boost::out_edges(static_cast<size_t>(id), impl_->graph);
  for (auto it = begin; it != end; ++it) out.push_back(static_cast<int>(boost::target(*it, impl_->graph)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const Op& ModelGraph::op_named(const std::string& name) const {
  for (const auto& o : impl_->ops)
    if (o.name == name) return o;
  throw Error(fmt::format("model {} has no op \"{}\"", impl_->spec.name, name))
      .hint("list the ops with `trainplan model " + impl_->spec.name + " --ops`");
}

double ModelGraph::total_params() const {
  double sum = 0;
  for (const auto& o : impl_->ops) sum += o.params;
  return sum;
}

double ModelGraph::active_params() const {
  double sum = 0;
  for (const auto& o : impl_->ops)
    sum += o.expert ? o.params * static_cast<double>(o.top_k) / static_cast<double>(o.num_experts) : o.params;
  return sum;
}

double ModelGraph::tokens_per_sample() const {
  const auto f = impl_->spec.family;
  if (f == Family::gpt || f == Family::llama || f == Family::bert) return static_cast<double>(impl_->spec.seq_len);
  return 1.0;
}

double ModelGraph::flops_fwd_per_sample() const {
  double sum = 0;
  for (const auto& o : impl_->ops) sum += o.flops_fwd;
  return sum;
}

double ModelGraph::training_flops_per_sample() const {
  double sum = 0;
  for (const auto& o : impl_->ops) sum += o.flops_fwd + o.flops_bwd;
  return sum;
}

int ModelGraph::num_blocks() const { return static_cast<int>(impl_->units.size()) - 2; }

double ModelGraph::saved_bytes_per_sample(Precision p) const {
  double sum = 0;
  for (const auto& o : impl_->ops) sum += o.saved_bytes(p);
  return sum;
}

}  // namespace trainplan::models
