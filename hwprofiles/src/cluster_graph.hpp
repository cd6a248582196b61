// Private: the Boost.Graph behind hw::Cluster and the route search on it.
#pragma once

#include <boost/graph/adjacency_list.hpp>

#include <optional>
#include <vector>

#include "trainplan/hwprofiles/cluster.hpp"

namespace trainplan::hw::detail {

struct EdgeProps {
  int link = 0;  // index into the Cluster's links
};

/// Vertices are Cluster vertex ids, edges the directed links (bidirectionalS so that searches
/// can walk backwards from the destination).
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, EdgeProps>;

/// Which vertices a route may use besides its two end GPUs.
struct RouteScope {
  int node_a = 0;                 // the source GPU's node
  int node_b = 0;                 // the destination GPU's node (== node_a: stay inside it)
  std::vector<char> excluded;     // per vertex: 1 = may not be used (empty: none excluded)
};

/// The best path from vertex `src` to vertex `dst`: widest bottleneck, then fewest hops, then
/// the lexicographically smallest link-id sequence. GPUs other than the end points, vertices
/// of other nodes and excluded vertices are not used; the fabric only when the nodes differ.
/// nullopt when no path exists.
std::optional<Route> search_route(const Graph& graph, const std::vector<Vertex>& vertices,
                                  const std::vector<Link>& links, int src, int dst, const RouteScope& scope);

/// Lexicographic comparison of link-id sequences (tie-break of equal routes).
bool links_less(const std::vector<int>& a, const std::vector<int>& b);

}  // namespace trainplan::hw::detail
