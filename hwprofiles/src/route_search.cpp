// Widest-then-shortest-then-lexicographic path search on the cluster graph.
//
// 1. The widest bottleneck B*: the largest link bandwidth t such that the destination can
//    be reached using only links of bandwidth >= t (a BFS per distinct bandwidth, widest
//    first, on the graph filtered by bandwidth and by the vertices the route may use).
// 2. Hop distances to the destination on that filtered graph (BFS on the reversed graph).
// 3. From the source, repeatedly take the lowest-id link that gets one hop closer: this is
//    the lexicographically smallest among the shortest widest paths.
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <boost/graph/reverse_graph.hpp>
#include <boost/graph/visitors.hpp>

#include <algorithm>
#include <functional>
#include <limits>

#include "cluster_graph.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::hw::detail {
namespace {

// Vertices a route may use: its end points, and non-GPU vertices of the allowed nodes (plus
// the fabric between two different nodes).
struct VertexOk {
  const std::vector<Vertex>* vertices = nullptr;
  const RouteScope* scope = nullptr;
  int src = -1;
  int dst = -1;
  bool operator()(std::size_t v_index) const {
    const int v = static_cast<int>(v_index);
    if (v == src || v == dst) return true;
    const Vertex& x = (*vertices)[v_index];
    if (x.kind == VertexKind::gpu) return false;  // GPUs never forward traffic
    if (!scope->excluded.empty() && scope->excluded[v_index]) return false;
    if (x.kind == VertexKind::fabric || x.kind == VertexKind::nvlink_domain || x.kind == VertexKind::region)
      return scope->node_a != scope->node_b;
    return x.node == scope->node_a || x.node == scope->node_b;
  }
};

// Links at least as wide as the current threshold. G is the graph or its reverse.
template <class G>
struct EdgeOk {
  const G* graph = nullptr;
  const std::vector<Link>* links = nullptr;
  double min_bandwidth = 0;
  template <class E>
  bool operator()(const E& e) const {
    return (*links)[static_cast<size_t>((*graph)[e].link)].bandwidth_bytes_per_s >= min_bandwidth;
  }
};

// Hop distance from `from` to every vertex of `g` (-1: unreachable).
template <class G>
std::vector<int> bfs_distances(const G& g, int from, size_t num_vertices) {
  std::vector<int> dist(num_vertices, -1);
  dist[static_cast<size_t>(from)] = 0;
  auto dist_map = boost::make_iterator_property_map(dist.begin(), boost::get(boost::vertex_index, g));
  boost::breadth_first_search(
      g, static_cast<typename boost::graph_traits<G>::vertex_descriptor>(from),
      boost::visitor(boost::make_bfs_visitor(boost::record_distances(dist_map, boost::on_tree_edge()))));
  return dist;
}

}  // namespace

bool links_less(const std::vector<int>& a, const std::vector<int>& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
}

std::optional<Route> search_route(const Graph& graph, const std::vector<Vertex>& vertices,
                                  const std::vector<Link>& links, int src, int dst, const RouteScope& scope) {
  TP_ASSERT(src != dst);
  const size_t n = boost::num_vertices(graph);
  VertexOk vertex_ok{&vertices, &scope, src, dst};

  std::vector<double> widths;
  for (const auto& l : links) widths.push_back(l.bandwidth_bytes_per_s);
  std::sort(widths.begin(), widths.end(), std::greater<>());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());

  using Reverse = boost::reverse_graph<Graph>;
  const Reverse reversed(graph);
  for (double width : widths) {
    EdgeOk<Reverse> edge_ok{&reversed, &links, width};
    boost::filtered_graph<Reverse, EdgeOk<Reverse>, VertexOk> filtered(reversed, edge_ok, vertex_ok);
    std::vector<int> to_dst = bfs_distances(filtered, dst, n);
    if (to_dst[static_cast<size_t>(src)] < 0) continue;

    Route route;
    route.bottleneck_bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
    int u = src;
    while (u != dst) {
      int best_link = -1;
      int best_next = -1;
      for (auto [e, end] = boost::out_edges(static_cast<size_t>(u), graph); e != end; ++e) {
        const int link = graph[*e].link;
        const int v = static_cast<int>(boost::target(*e, graph));
        const Link& l = links[static_cast<size_t>(link)];
        if (l.bandwidth_bytes_per_s < width || !vertex_ok(static_cast<size_t>(v))) continue;
        if (to_dst[static_cast<size_t>(v)] != to_dst[static_cast<size_t>(u)] - 1) continue;
        if (best_link < 0 || link < best_link) {
          best_link = link;
          best_next = v;
        }
      }
      TP_ASSERT(best_link >= 0);
      const Link& l = links[static_cast<size_t>(best_link)];
      route.links.push_back(best_link);
      route.latency_s += l.latency_s;
      route.bottleneck_bandwidth_bytes_per_s = std::min(route.bottleneck_bandwidth_bytes_per_s, l.bandwidth_bytes_per_s);
      u = best_next;
    }
    route.hops = static_cast<int>(route.links.size());
    return route;
  }
  return std::nullopt;
}

}  // namespace trainplan::hw::detail
