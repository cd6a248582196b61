#include "catalog_parse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <set>

#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::hw::detail {
namespace {

using json::Reader;
using units::Dimension;

// ---- small readers -------------------------------------------------------------------------

double positive_quantity(const Reader& r, Dimension dim) {
  double v = r.as_quantity(dim);
  if (!(v > 0.0))
    throw r.error(fmt::format("must be positive, got {}", v))
        .hint("use a value greater than zero");
  return v;
}

// A reference to a source id, checked once every file has been read.
struct SourceRef {
  std::string id;
  std::string file;
  std::string pointer;
};

// ---- layered objects: an instance's fields fall back to its family's "defaults" ----------

// One object of the "defaults" tree. Child readers are cached so that fields marked as read
// while loading one instance stay marked for the final unknown-field check.
struct DefaultsNode {
  Reader reader;
  std::map<std::string, std::unique_ptr<DefaultsNode>, std::less<>> children;

  explicit DefaultsNode(Reader r) : reader(std::move(r)) {}
  DefaultsNode* child(std::string_view key) {
    auto it = children.find(key);
    if (it != children.end()) return it->second.get();
    auto f = reader.optional_field(key);
    if (!f) return nullptr;
    if (!f->is_object()) (void)f->entries();  // throws "must be an object"
    auto node = std::make_unique<DefaultsNode>(*f);
    DefaultsNode* out = node.get();
    children.emplace(std::string(key), std::move(node));
    return out;
  }
  // Checks every object in the tree for fields no instance read.
  void finish() const {
    reader.finish();
    for (const auto& [key, node] : children) node->finish();
  }
};

const json::Json& empty_object() {
  static const json::Json kEmpty = json::Json::object();
  return kEmpty;
}

class Layered {
 public:
  Layered(Reader top, DefaultsNode* base) : top_(std::move(top)), base_(base) {}

  const Reader& top() const { return top_; }

  /// The field from the instance, else from the defaults; nullopt if neither has it.
  std::optional<Reader> get(std::string_view key) const {
    if (top_.has(key)) {
      if (base_ && base_->reader.is_object()) base_->reader.ignore(key);
      return top_.optional_field(key);
    }
    if (base_ && base_->reader.has(key)) return base_->reader.optional_field(key);
    top_.ignore(key);
    return std::nullopt;
  }
  /// True when the instance itself (not the defaults) gives `key`.
  bool from_top(std::string_view key) const { return top_.has(key); }

  Reader require(std::string_view key) const {
    auto r = get(key);
    if (!r)
      throw Error(fmt::format("missing required field \"{}\"", key))
          .at(top_.file(), top_.pointer().empty() ? "/" : top_.pointer())
          .hint(fmt::format("add \"{}\" to this object or to the family's \"defaults\"", key));
    return *r;
  }

  /// A nested object (topology, network ...), layered the same way.
  Layered sub(std::string_view key) const {
    DefaultsNode* base_child = base_ ? base_->child(key) : nullptr;
    if (top_.has(key)) {
      Reader r = *top_.optional_field(key);
      if (!r.is_object()) (void)r.entries();  // throws "must be an object" at the right place
      return Layered(r, base_child);
    }
    top_.ignore(key);
    return Layered(Reader(empty_object(), top_.file(), top_.pointer() + "/" + std::string(key)), base_child);
  }

  std::string string_or(std::string_view key, const std::string& fallback) const {
    auto r = get(key);
    return r ? r->as_string() : fallback;
  }
  bool bool_or(std::string_view key, bool fallback) const {
    auto r = get(key);
    return r ? r->as_bool() : fallback;
  }

  /// Errors when the instance itself gives `key` although it does not apply (`why`).
  void reject_if_top(std::string_view key, const std::string& why) const {
    if (!top_.has(key)) return;
    throw Error(fmt::format("\"{}\" does not apply here: {}", key, why))
        .at(top_.file(), top_.pointer() + "/" + std::string(key))
        .hint("remove it");
  }

  void finish() const { top_.finish(); }

 private:
  Reader top_;
  DefaultsNode* base_;
};

// ---- sources -------------------------------------------------------------------------------

Source parse_source(const std::string& id, const Reader& r) {
  Source s;
  s.id = id;
  s.description = r.field("description").as_string();
  if (s.description.empty())
    throw r.field("description").error("must not be empty").hint("say what the source is, enough to find it again");
  Reader date = r.field("date");
  s.date = date.as_string();
  if (!is_iso_date(s.date))
    throw date.error(fmt::format("\"{}\" is not a date", s.date))
        .hint("write an ISO date: \"2026-09-24\", \"2026-09\" or \"2026\"");
  s.verified = r.bool_or("verified", true);
  r.finish();
  return s;
}

void add_source_refs(const Reader& r, std::vector<SourceRef>& refs) {
  std::string ref = r.as_string();
  auto ids = split_source_ids(ref);
  if (ids.empty()) throw r.error("must name a source id").hint("use an id from the \"sources\" table (sources.json)");
  for (auto& id : ids) refs.push_back({id, r.file(), r.pointer()});
}

// ---- GPUs ----------------------------------------------------------------------------------

GpuSpec parse_gpu(const std::string& name, const Reader& r, std::vector<SourceRef>& refs) {
  GpuSpec g;
  g.name = name;
  g.file = r.file();
  g.arch = r.field("arch").as_string();
  if (auto rt = r.optional_field("runtime")) g.runtime = rt->as_choice({"cuda", "neuron"});
  const bool cuda = g.runtime == "cuda";
  // A Neuron chip has no CUDA compute capability and no cuBLAS workspace.
  if (cuda || r.has("compute_capability")) g.compute_capability = r.field("compute_capability").as_string();
  g.memory_bytes = positive_quantity(r.field("memory"), Dimension::bytes);
  g.memory_type = r.field("memory_type").as_string();
  g.memory_bandwidth_bytes_per_s = positive_quantity(r.field("memory_bandwidth"), Dimension::bandwidth);
  Reader peak = r.field("peak");
  for (auto& [key, value] : peak.entries()) {
    auto p = parse_precision(key);
    if (!p)
      throw Error(fmt::format("unknown precision \"{}\"", key))
          .at(value.file(), value.pointer())
          .hint(suggestion(key, precision_names()));
    g.peak_flops[*p] = positive_quantity(value, Dimension::flops_rate);
  }
  if (g.peak_flops.empty()) throw peak.error("must give at least one precision").hint("e.g. {\"fp16\": \"65TFLOPS\"}");
  if (cuda || r.has("tdp_w")) g.tdp_w = r.field("tdp_w").as_positive();  // AWS publishes no Trainium TDP
  g.sm_count = static_cast<int>(r.field("sm_count").as_positive_int());
  if (cuda)
    g.cublas_workspace_bytes = positive_quantity(r.field("cublas_workspace"), Dimension::bytes);
  else if (r.has("cublas_workspace"))
    throw r.field("cublas_workspace").error("a Neuron accelerator has no cuBLAS workspace").hint("remove it");
  // Measured matmul rates by precision: "mamf" (burst maximum) and "sustained_matmul" (held at
  // the power limit); each below the dense peak of a precision the GPU lists.
  auto measured_rates = [&](const char* field, std::map<Precision, double>& into) {
    auto rates = r.optional_field(field);
    if (!rates) return;
    for (auto& [key, value] : rates->entries()) {
      auto p = parse_precision(key);
      if (!p || !g.peak_flops.count(*p))
        throw Error(fmt::format("\"{}\" is not a precision of this GPU's peaks", key))
            .at(value.file(), value.pointer())
            .hint("a measured matmul rate belongs to a precision listed in \"peak\"");
      into[*p] = positive_quantity(value, Dimension::flops_rate);
      if (into[*p] > g.peak_flops.at(*p))
        throw value.error("exceeds the dense peak of this precision").hint("a measured rate is below the peak");
    }
  };
  measured_rates("mamf", g.mamf_flops);
  measured_rates("sustained_matmul", g.sustained_matmul_flops);
  Reader sources = r.field("sources");
  for (auto& [group, value] : sources.entries()) {
    const auto& groups = gpu_source_groups();
    if (std::find(groups.begin(), groups.end(), group) == groups.end())
      throw Error(fmt::format("unknown source group \"{}\"", group))
          .at(value.file(), value.pointer())
          .hint(suggestion(group, groups));
    add_source_refs(value, refs);
    g.sources[group] = value.as_string();
  }
  for (const auto& group : gpu_source_groups())
    if (!g.sources.count(group) && (group != "mamf" || !g.mamf_flops.empty()) &&
        (group != "sustained_matmul" || !g.sustained_matmul_flops.empty()) &&
        (cuda || (group != "cublas_workspace" && (group != "compute_capability" || !g.compute_capability.empty()) &&
                  (group != "tdp" || g.tdp_w > 0))))
      throw sources.error(fmt::format("no source for \"{}\"", group))
          .hint("every field group needs a source id: " + join(gpu_source_groups(), ", "));
  g.source = g.sources.at("peaks");
  if (auto notes = r.optional_field("notes"))
    for (auto& n : notes->items()) g.notes.push_back(n.as_string());
  r.finish();
  return g;
}

// ---- EC2 Capacity Blocks ----------------------------------------------------------------------

// {"rules": {...}, "offers": [{"instance", "region", "usd_per_instance_hour", "source"}]}; one
// file of the catalog may hold it.
void parse_capacity_blocks(const Reader& r, std::vector<SourceRef>& refs, ParsedCatalog& out) {
  if (!out.capacity_block_rules.source.empty() || !out.capacity_block_offers.empty())
    throw r.error("Capacity Blocks are defined twice").hint("keep one \"capacity_blocks\" table in the catalog");
  Reader rules = r.field("rules");
  CapacityBlockRules& cr = out.capacity_block_rules;
  cr.day_steps_up_to_days = static_cast<int>(rules.field("day_steps_up_to_days").as_positive_int(366));
  cr.week_steps_up_to_days = static_cast<int>(rules.field("week_steps_up_to_days").as_positive_int(3660));
  if (cr.week_steps_up_to_days < cr.day_steps_up_to_days)
    throw rules.field("week_steps_up_to_days").error("is below day_steps_up_to_days").hint("AWS: 14 and 182 days");
  cr.max_instances_per_block = static_cast<int>(rules.field("max_instances_per_block").as_positive_int(1 << 20));
  cr.max_start_lead_days = static_cast<int>(rules.field("max_start_lead_days").as_positive_int(3660));
  add_source_refs(rules.field("source"), refs);
  cr.source = rules.field("source").as_string();
  rules.finish();
  for (auto& item : r.field("offers").items()) {
    CapacityBlockOffer o;
    o.instance_type = item.field("instance").as_string();
    o.region = item.field("region").as_string();
    o.usd_per_instance_hour = item.field("usd_per_instance_hour").as_positive(limits::kMaxUsdPerHour);
    add_source_refs(item.field("source"), refs);
    o.source = item.field("source").as_string();
    for (const auto& other : out.capacity_block_offers)
      if (other.instance_type == o.instance_type && other.region == o.region)
        throw item.error(fmt::format("a second Capacity Block price for {} in {}", o.instance_type, o.region))
            .hint("one offer per instance type and region");
    item.finish();
    out.capacity_block_offers.push_back(std::move(o));
    out.capacity_block_locations.emplace_back(item.file(), item.pointer() + "/instance");
  }
  r.ignore("comment");
  r.finish();
}

// ---- placement (AZs, data transfer) ---------------------------------------------------------

// {"inter_az_latency", "single_flow_bandwidth", "nccl_socket_flows", "inter_az_usd_per_gb",
//  "sources": {fact: id}, "inter_region": [{"from", "usd_per_gb", "to": {region: usd}, "source"}]};
// one file of the catalog may hold it.
void parse_placement(const Reader& r, std::vector<SourceRef>& refs, ParsedCatalog& out) {
  if (out.placement.present())
    throw r.error("placement facts are defined twice").hint("keep one \"placement\" table in the catalog");
  PlacementFacts& f = out.placement;
  f.inter_az_latency_s = positive_quantity(r.field("inter_az_latency"), Dimension::duration);
  f.single_flow_bandwidth_bytes_per_s = positive_quantity(r.field("single_flow_bandwidth"), Dimension::bandwidth);
  f.nccl_socket_flows = static_cast<int>(r.field("nccl_socket_flows").as_positive_int(1024));
  f.inter_az_usd_per_gb = r.field("inter_az_usd_per_gb").as_nonnegative(100.0);
  Reader src = r.field("sources");
  for (const char* fact : {"efa_one_az", "inter_az_latency", "single_flow_bandwidth", "nccl_socket_flows", "inter_az_usd_per_gb"}) {
    add_source_refs(src.field(fact), refs);
    f.sources[fact] = src.field(fact).as_string();
  }
  src.finish();
  for (auto& item : r.field("inter_region").items()) {
    InterRegionPrice p;
    p.from = item.field("from").as_string();
    p.usd_per_gb = item.field("usd_per_gb").as_nonnegative(100.0);
    if (auto to = item.optional_field("to"))
      for (auto& [region, value] : to->entries()) p.to[region] = value.as_nonnegative(100.0);
    add_source_refs(item.field("source"), refs);
    p.source = item.field("source").as_string();
    for (const auto& other : f.inter_region)
      if (other.from == p.from)
        throw item.field("from").error(fmt::format("a second inter-region price out of {}", p.from)).hint("one entry per source region");
    item.finish();
    f.inter_region.push_back(std::move(p));
  }
  r.ignore("comment");
  r.finish();
}

// ---- software stacks -----------------------------------------------------------------------

// {name: {"description", "launch", "kernel_gap", "layer_hook", "micro_batch", "step",
//         "sync_before_optimizer", "kernels": {op class: multiple}, optional "zero3_tensor_sync",
//         "zero3_tensor_issue", "zero3_rank_view", "zero3_rank_copy", "zero3_recompute_gathers", "fused_attention", "grad_reduce": {training precision:
//         reduce precision}, "fp32_main_grads", "grad_epilogue", "sources": {field: id}}}
void parse_software(const Reader& r, std::vector<SourceRef>& refs, ParsedCatalog& out) {
  for (auto& [name, item] : r.entries()) {
    if (out.software.count(name))
      throw item.error(fmt::format("software stack \"{}\" is defined twice", name)).hint("stack names must be unique across the catalog");
    SoftwareStack s;
    s.name = name;
    s.description = item.field("description").as_string();
    s.launch_s = positive_quantity(item.field("launch"), Dimension::duration);
    s.kernel_gap_s = item.field("kernel_gap").as_quantity(Dimension::duration);
    s.layer_hook_s = item.field("layer_hook").as_quantity(Dimension::duration);
    s.micro_batch_s = item.field("micro_batch").as_quantity(Dimension::duration);
    s.step_s = item.field("step").as_quantity(Dimension::duration);
    for (const char* f : {"kernel_gap", "layer_hook", "micro_batch", "step"}) {
      const double v = item.field(f).as_quantity(Dimension::duration);
      if (v < 0 || v > 1.0)
        throw item.field(f).error(fmt::format("must be between 0 and 1 s, got {}", v)).hint("a host or launch cost, e.g. \"10us\"");
    }
    if (s.launch_s > 1e-3)
      throw item.field("launch").error(fmt::format("must be at most 1 ms per kernel, got {}", s.launch_s)).hint("a kernel launch costs microseconds, e.g. \"4us\"");
    s.sync_before_optimizer = item.field("sync_before_optimizer").as_bool();
    if (auto z = item.optional_field("zero3_tensor_sync")) s.zero3_tensor_sync = z->as_bool();
    if (auto z = item.optional_field("zero3_recompute_gathers")) s.zero3_recompute_gathers = z->as_bool();
    for (const char* f : {"zero3_rank_view", "zero3_rank_copy"})
      if (auto z = item.optional_field(f)) {
        const double v = z->as_quantity(Dimension::duration);
        if (!(v >= 0 && v <= 1e-3))
          throw z->error(fmt::format("must be between 0 and 1 ms, got {}", v)).hint("the host time per rank of the group, e.g. \"4us\"");
        if (!s.zero3_tensor_sync)
          throw z->error("applies only with \"zero3_tensor_sync\": true").hint(fmt::format("set zero3_tensor_sync, or remove {}", f));
        (std::string_view(f) == "zero3_rank_view" ? s.zero3_rank_view_s : s.zero3_rank_copy_s) = v;
      }
    if (auto a = item.optional_field("fused_attention")) {
      s.fused_attention = a->as_string();
      if (s.fused_attention != "flash-attn-2")
        throw a->error(fmt::format("unknown fused attention \"{}\"", s.fused_attention))
            .hint("\"flash-attn-2\" (the flash-attn 2 package), or leave it out for the GPU's best fused kernel");
    }
    if (auto g = item.optional_field("grad_reduce")) {
      for (auto& [training, value] : g->entries()) {
        const auto from = parse_precision(training);
        if (!from)
          throw value.error(fmt::format("unknown training precision \"{}\"", training)).hint("one of: " + join(precision_names(), ", "));
        const auto to = parse_precision(value.as_choice({"fp32", "bf16", "fp16"}));  // what NCCL reduces in
        if (bytes_per_element(*to) < bytes_per_element(*from))
          throw value.error(fmt::format("reduces {} gradients in {}, fewer bytes than they have", training, precision_name(*to)))
              .hint("name the wider precision the stack reduces in, e.g. \"fp32\"");
        s.grad_reduce[*from] = *to;
      }
    }
    if (auto f = item.optional_field("fp32_main_grads")) s.fp32_main_grads = f->as_bool();
    if (auto f = item.optional_field("grad_epilogue")) s.grad_epilogue = f->as_bool();
    if (auto z = item.optional_field("zero3_tensor_issue")) {
      s.zero3_tensor_issue_s = z->as_quantity(Dimension::duration);
      if (!(s.zero3_tensor_issue_s >= 0 && s.zero3_tensor_issue_s <= 0.1))
        throw z->error(fmt::format("must be between 0 and 100 ms, got {}", s.zero3_tensor_issue_s))
            .hint("the host time to issue one parameter tensor's all-gather, e.g. \"380us\"");
      if (!s.zero3_tensor_sync)
        throw z->error("applies only with \"zero3_tensor_sync\": true").hint("set zero3_tensor_sync, or remove zero3_tensor_issue");
    }
    if (auto k = item.optional_field("kernels")) {
      for (auto& [op_class, value] : k->entries()) {
        if (std::find(kFusableOpClasses.begin(), kFusableOpClasses.end(), op_class) == kFusableOpClasses.end())
          throw value.error(fmt::format("unknown op class \"{}\"", op_class))
              .hint("one of: " + join(std::vector<std::string>(kFusableOpClasses.begin(), kFusableOpClasses.end()), ", "));
        s.kernels[op_class] = value.as_nonnegative(8.0);
      }
    }
    Reader src = item.field("sources");
    for (const char* f : {"launch", "kernel_gap", "layer_hook", "micro_batch", "step", "sync_before_optimizer", "kernels",
                          "zero3_tensor_sync", "zero3_tensor_issue", "zero3_rank_view", "zero3_rank_copy", "zero3_recompute_gathers",
                          "fused_attention", "grad_reduce", "fp32_main_grads", "grad_epilogue"}) {
      const std::string_view optional = f;
      if (!item.has(f) && (optional == "kernels" || optional == "fused_attention" || optional == "grad_reduce" ||
                           optional == "fp32_main_grads" || optional == "grad_epilogue" || optional.starts_with("zero3_")))
        continue;
      add_source_refs(src.field(f), refs);
      s.sources[f] = src.field(f).as_string();
    }
    src.finish();
    item.ignore("comment");
    item.finish();
    out.software[name] = std::move(s);
  }
}

// ---- regions -------------------------------------------------------------------------------

// {"names": [...], "source": id, "notes": {type: text}, "instances": {type: {region: {"ec2_on_demand",
// "spot_min", "spot_max", "zones"}}}}; one file of the catalog may hold it.
void parse_region_table(const Reader& r, std::vector<SourceRef>& refs, ParsedCatalog& out) {
  RegionTable& t = out.regions;
  if (!t.names.empty()) throw r.error("regions are defined twice").hint("keep one \"regions\" table in the catalog");
  for (auto& item : r.field("names").items()) {
    std::string name = item.as_string();
    if (name.empty() || std::find(t.names.begin(), t.names.end(), name) != t.names.end())
      throw item.error(fmt::format("region \"{}\" is empty or listed twice", name)).hint("list each region once, e.g. \"eu-west-1\"");
    t.names.push_back(std::move(name));
  }
  if (t.names.empty()) throw r.field("names").error("lists no region").hint("e.g. [\"us-east-1\", \"eu-west-1\"]");
  add_source_refs(r.field("source"), refs);
  t.source = r.field("source").as_string();
  if (auto notes = r.optional_field("notes"))
    for (auto& [type, text] : notes->entries()) {
      t.notes[type] = text.as_string();
      out.region_locations.emplace(type, std::make_pair(text.file(), text.pointer()));
    }
  for (auto& [type, regions] : r.field("instances").entries()) {
    out.region_locations[type] = {regions.file(), regions.pointer()};
    auto& per_region = t.instances[type];
    for (auto& [region, entry] : regions.entries()) {
      if (std::find(t.names.begin(), t.names.end(), region) == t.names.end())
        throw entry.error(fmt::format("unknown region \"{}\"", region))
            .hint("add it to /regions/names or use one of: " + join(t.names, ", "));
      RegionOffer o;
      if (auto v = entry.optional_field("ec2_on_demand")) o.ec2_on_demand = v->as_positive(limits::kMaxUsdPerHour);
      if (auto v = entry.optional_field("spot_min")) o.spot_min = v->as_positive(limits::kMaxUsdPerHour);
      if (auto v = entry.optional_field("spot_max")) o.spot_max = v->as_positive(limits::kMaxUsdPerHour);
      if (o.spot_min.has_value() != o.spot_max.has_value())
        throw entry.error("spot_min and spot_max go together").hint("give both (the lowest and highest sampled spot price)");
      if (o.spot_min && *o.spot_min > *o.spot_max)
        throw entry.field("spot_min").error(fmt::format("is above spot_max ({} > {})", *o.spot_min, *o.spot_max))
            .hint("spot_min is the lowest sample, spot_max the highest");
      for (auto& z : entry.field("zones").items()) o.zones.push_back(z.as_string());
      if (o.zones.empty()) throw entry.field("zones").error("lists no zone").hint("a type offered in a region is offered in some zone of it");
      entry.finish();
      per_region[region] = std::move(o);
    }
    if (per_region.empty())
      throw regions.error("lists no region").hint("a type offered nowhere in the table's regions is left out of the table");
  }
  r.ignore("comment");
  r.finish();
}

// ---- instances -----------------------------------------------------------------------------

IntraNodeTopology parse_topology(const Layered& t, int gpu_count) {
  IntraNodeTopology topo;
  static const std::vector<std::string> kKinds = {"single", "pcie", "nvlink_mesh", "nvswitch"};
  std::string kind = t.require("kind").as_choice(kKinds);
  topo.kind = kind == "single" ? IntraNodeKind::single
            : kind == "pcie"   ? IntraNodeKind::pcie
            : kind == "nvlink_mesh" ? IntraNodeKind::nvlink_mesh
                                    : IntraNodeKind::nvswitch;
  const bool mesh = topo.kind == IntraNodeKind::nvlink_mesh;
  const bool nvswitch = topo.kind == IntraNodeKind::nvswitch;
  if (mesh) {
    Reader lanes = t.require("nvlink_lanes");
    auto rows = lanes.items();
    if (static_cast<int>(rows.size()) != gpu_count)
      throw lanes.error(fmt::format("must have {} rows (one per GPU), got {}", gpu_count, rows.size()))
          .hint("nvlink_lanes[i][j] = NVLink lanes between GPU i and GPU j");
    for (auto& row : rows) {
      auto cells = row.items();
      if (static_cast<int>(cells.size()) != gpu_count)
        throw row.error(fmt::format("must have {} columns (one per GPU), got {}", gpu_count, cells.size()))
            .hint("nvlink_lanes[i][j] = NVLink lanes between GPU i and GPU j");
      std::vector<int> out;
      for (auto& c : cells) out.push_back(static_cast<int>(c.as_nonnegative_int(1 << 20)));
      topo.nvlink_lanes.push_back(std::move(out));
    }
    topo.nvlink_lane_bandwidth_bytes_per_s = positive_quantity(t.require("nvlink_lane_bandwidth"), Dimension::bandwidth);
  } else {
    t.reject_if_top("nvlink_lanes", "only for kind \"nvlink_mesh\"");
    t.reject_if_top("nvlink_lane_bandwidth", "only for kind \"nvlink_mesh\"");
  }
  if (nvswitch) {
    topo.nvswitch_bandwidth_bytes_per_s = positive_quantity(t.require("nvswitch_bandwidth"), Dimension::bandwidth);
    if (auto d = t.get("nvlink_domain_instances")) topo.nvlink_domain_instances = static_cast<int>(d->as_positive_int(1024));
  } else {
    t.reject_if_top("nvswitch_bandwidth", "only for kind \"nvswitch\"");
    t.reject_if_top("nvlink_domain_instances", "only for kind \"nvswitch\" (an NVLink switch domain spanning instances)");
  }
  if (mesh || nvswitch)
    topo.nvlink_latency_s = t.require("nvlink_latency").as_quantity(Dimension::duration);
  else
    t.reject_if_top("nvlink_latency", "only for NVLink topologies");
  if (auto gen = t.get("pcie_generation")) topo.pcie_generation = static_cast<int>(gen->as_positive_int(64));
  topo.pcie_bandwidth_bytes_per_s = positive_quantity(t.require("pcie_bandwidth"), Dimension::bandwidth);
  topo.pcie_latency_s = t.require("pcie_latency").as_quantity(Dimension::duration);
  if (auto per = t.get("gpus_per_pcie_switch")) topo.gpus_per_pcie_switch = static_cast<int>(per->as_nonnegative_int(limits::kMaxGpusPerInstance));
  if (topo.gpus_per_pcie_switch > 0)
    topo.pcie_switch_uplink_bytes_per_s = positive_quantity(t.require("pcie_switch_uplink"), Dimension::bandwidth);
  else
    t.reject_if_top("pcie_switch_uplink", "the instance has no PCIe switches (gpus_per_pcie_switch is 0)");
  if (auto s = t.get("sockets")) topo.sockets = static_cast<int>(s->as_positive_int(1024));
  if (topo.sockets > 1) {
    topo.inter_socket_bandwidth_bytes_per_s = positive_quantity(t.require("inter_socket_bandwidth"), Dimension::bandwidth);
    topo.inter_socket_latency_s = t.require("inter_socket_latency").as_quantity(Dimension::duration);
  } else {
    t.reject_if_top("inter_socket_bandwidth", "the instance has one socket");
    t.reject_if_top("inter_socket_latency", "the instance has one socket");
  }
  t.finish();
  return topo;
}

NetworkSpec parse_network(const Layered& n) {
  NetworkSpec net;
  net.bandwidth_bytes_per_s = positive_quantity(n.require("bandwidth"), Dimension::bandwidth);
  if (auto nics = n.get("nics")) net.nics = static_cast<int>(nics->as_positive_int(1024));
  net.efa = n.bool_or("efa", false);
  net.gpudirect_rdma = n.bool_or("gpudirect_rdma", false);
  net.latency_s = positive_quantity(n.require("latency"), Dimension::duration);
  net.fabric = n.require("fabric").as_string();
  net.burstable = n.bool_or("burstable", false);
  if (auto v = n.get("nccl_net_latency")) {
    net.nccl_net_latency_s = v->as_quantity(Dimension::duration);
    if (!(net.nccl_net_latency_s >= 0 && net.nccl_net_latency_s <= 0.01))
      throw v->error(fmt::format("must be a duration from 0 to 10 ms, got {}", v->value().dump()))
          .hint("the per-message latency the network plugin reports to NCCL, e.g. \"75us\" (aws-ofi-nccl on p5)");
  }
  net.nccl_simple_only = n.bool_or("nccl_simple_only", net.efa);
  if (net.nccl_simple_only && !net.efa)
    throw n.require("nccl_simple_only").error("is true on a network without EFA")
        .hint("only the aws-ofi-nccl plugin over EFA forces NCCL's Simple protocol; drop the field or set efa");
  n.finish();
  return net;
}

StorageSpec parse_storage(const Layered& s) {
  StorageSpec st;
  if (auto v = s.get("local_nvme")) st.local_nvme_bytes = v->as_quantity(Dimension::bytes);
  if (st.local_nvme_bytes > 0) {
    st.nvme_devices = static_cast<int>(s.require("nvme_devices").as_positive_int(1024));
  } else {
    s.reject_if_top("nvme_devices", "the instance has no local NVMe (local_nvme is 0 or missing)");
  }
  if (auto v = s.get("nvme_read_bandwidth")) st.nvme_read_bandwidth_bytes_per_s = positive_quantity(*v, Dimension::bandwidth);
  if (auto v = s.get("nvme_write_bandwidth")) st.nvme_write_bandwidth_bytes_per_s = positive_quantity(*v, Dimension::bandwidth);
  if (auto v = s.get("ebs_bandwidth")) st.ebs_bandwidth_bytes_per_s = positive_quantity(*v, Dimension::bandwidth);
  s.finish();
  return st;
}

Prices parse_prices(const Layered& p, bool aws) {
  Prices pr;
  auto usd = [&](std::string_view key) -> std::optional<double> {
    auto v = p.get(key);
    if (!v) return std::nullopt;
    if (!aws)
      throw v->error("a generic (non-AWS) cluster has no AWS prices")
          .hint("remove it, or give prices in a user price file (--prices)");
    return v->as_positive(limits::kMaxUsdPerHour);
  };
  pr.ec2_on_demand = usd("ec2_on_demand");
  pr.sagemaker_on_demand = usd("sagemaker_on_demand");
  if (auto v = p.get("sagemaker_uplift")) {
    pr.sagemaker_uplift = v->as_positive();
    if (*pr.sagemaker_uplift < 1.0 || *pr.sagemaker_uplift > 3.0)
      throw v->error(fmt::format("must be a SageMaker/EC2 price ratio between 1 and 3, got {}", *pr.sagemaker_uplift))
          .hint("ratios seen are 1.15-1.40");
  }
  pr.spot_min = usd("spot_min");
  pr.spot_max = usd("spot_max");
  if (pr.spot_min.has_value() != pr.spot_max.has_value())
    throw p.top().error("spot_min and spot_max go together").hint("give both (the lowest and highest sampled spot price)");
  if (pr.spot_min && *pr.spot_min > *pr.spot_max)
    throw p.require("spot_min").error(fmt::format("is above spot_max ({} > {})", *pr.spot_min, *pr.spot_max))
        .hint("spot_min is the lowest sample, spot_max the highest");
  if (auto v = p.get("spot_discount")) {
    double d = v->as_quantity(Dimension::ratio);
    if (!(d > 0.0 && d < 1.0))
      throw v->error(fmt::format("must be a fraction between 0 and 1 (exclusive), got {}", v->value().dump()))
          .hint("write e.g. \"64%\" or 0.64 for spot prices 64% below on-demand");
    pr.spot_discount = d;
  }
  if (auto v = p.get("interruption_bucket")) pr.interruption_bucket = v->as_choice(interruption_buckets());
  pr.region = p.string_or("region", aws ? "us-east-1" : "");
  p.finish();
  return pr;
}

// Which source groups have a value, so that a source is required (true) or must not be given
// by the instance itself (false).
std::map<std::string, bool> groups_with_values(const InstanceType& inst, const Prices& raw) {
  return {
      {"hardware", true},
      {"topology", true},
      {"pcie", true},
      {"network", true},
      {"efa", true},
      {"gpudirect_rdma", inst.network.gpudirect_rdma},
      {"network_latency", true},
      {"nccl_net_latency", inst.network.nccl_net_latency_s > 0},
      {"nccl_protocols", inst.network.efa && !inst.network.nccl_simple_only},
      {"storage", true},
      {"ebs", inst.storage.ebs_bandwidth_bytes_per_s > 0},
      {"ec2_on_demand", raw.ec2_on_demand.has_value()},
      {"sagemaker", raw.sagemaker_on_demand.has_value()},
      {"sagemaker_uplift", raw.sagemaker_uplift.has_value()},
      {"spot", raw.spot_min.has_value()},
      {"spot_discount", raw.spot_discount.has_value()},
      {"interruption", !raw.interruption_bucket.empty()},
      {"capacity_block", false},  // from the catalog's Capacity Block offers
  };
}

InstanceType parse_instance(const Layered& L, std::vector<SourceRef>& refs) {
  InstanceType inst;
  const Reader& top = L.top();
  inst.file = top.file();
  inst.name = top.field("name").as_string();
  if (inst.name.empty()) throw top.field("name").error("must not be empty");
  inst.family = L.require("family").as_string();
  inst.aws = L.bool_or("aws", true);
  if (inst.aws && inst.name.rfind(inst.family + ".", 0) != 0)
    throw L.require("family").error(fmt::format("AWS instance \"{}\" is not in family \"{}\"", inst.name, inst.family))
        .hint("an AWS instance name is <family>.<size>, e.g. p4d.24xlarge in family p4d");
  inst.description = L.string_or("description", "");
  inst.cpu = L.string_or("cpu", "");
  inst.gpu = L.require("gpu").as_string();
  inst.gpu_count = static_cast<int>(L.require("gpu_count").as_positive_int(limits::kMaxGpusPerInstance));
  inst.vcpus = static_cast<int>(L.require("vcpus").as_positive_int(1 << 20));
  inst.host_memory_bytes = positive_quantity(L.require("host_memory"), Dimension::bytes);
  inst.topology = parse_topology(L.sub("topology"), inst.gpu_count);
  inst.network = parse_network(L.sub("network"));
  inst.storage = parse_storage(L.sub("storage"));
  inst.prices = parse_prices(L.sub("prices"), inst.aws);

  // Sources: group -> id; defaults may name groups an instance has no value for (those are
  // dropped), the instance itself may not.
  Layered src = L.sub("sources");
  const auto with_values = groups_with_values(inst, inst.prices);
  for (const auto& group : instance_source_groups()) {
    auto r = src.get(group);
    bool has_value = with_values.at(group);
    if (!r) {
      if (has_value)
        throw src.top().error(fmt::format("no source for \"{}\"", group))
            .hint("name the source id of this field group here or in the family's \"defaults\"");
      continue;
    }
    if (!has_value) {
      if (src.from_top(group) && group != "gpudirect_rdma")
        throw r->error(fmt::format("names a source for \"{}\" but the instance has no such value", group))
            .hint("remove it, or add the value it is the source of");
      if (group != "gpudirect_rdma") continue;
    }
    add_source_refs(*r, refs);
    inst.sources[group] = r->as_string();
  }
  src.finish();
  L.finish();
  return inst;
}

// Reads the notes of a family's defaults and of the instance (both optional), in that order.
std::vector<std::string> read_notes(const Reader& top, DefaultsNode* defaults) {
  std::vector<std::string> out;
  if (defaults && defaults->reader.has("notes"))
    for (auto& n : defaults->reader.optional_field("notes")->items()) out.push_back(n.as_string());
  if (top.has("notes"))
    for (auto& n : top.optional_field("notes")->items()) out.push_back(n.as_string());
  return out;
}

// ---- CPU instances: "cpu_families": {family: {shared fields, "sizes": [...]}} -------------
// A size's fields: name, vcpus, memory, network (baseline), network_burst (burstable sizes),
// ec2_on_demand, sagemaker_on_demand (both optional). Family fields: description, cpu,
// threads_per_core, network_latency, fabric, sagemaker_uplift, spot_discount, sources, notes.
void parse_cpu_families(const Reader& families, std::vector<SourceRef>& refs, ParsedCatalog& out) {
  static const std::vector<std::string> kGroups = {"hardware",  "network",          "network_latency", "ec2_on_demand",
                                                   "sagemaker", "sagemaker_uplift", "spot_discount"};
  for (auto& [family, f] : families.entries()) {
    const int threads_per_core = static_cast<int>(f.field("threads_per_core").as_positive_int(4));
    const double latency_s = positive_quantity(f.field("network_latency"), Dimension::duration);
    std::optional<double> uplift, discount;
    if (auto u = f.optional_field("sagemaker_uplift")) uplift = u->as_number_in(1.0, 3.0);
    if (auto d = f.optional_field("spot_discount")) {
      discount = d->as_number();
      if (!(*discount > 0.0 && *discount < 1.0))
        throw d->error(fmt::format("must be a fraction between 0 and 1 (exclusive), got {}", d->value().dump()))
            .hint("write e.g. 0.6 for spot prices 60% below on-demand");
    }
    std::map<std::string, std::string> family_sources;
    Reader src = f.field("sources");
    for (auto& [group, id] : src.entries()) {
      if (std::find(kGroups.begin(), kGroups.end(), group) == kGroups.end())
        throw id.error(fmt::format("unknown source group \"{}\"", group)).hint(suggestion(group, kGroups));
      add_source_refs(id, refs);
      family_sources[group] = id.as_string();
    }
    std::vector<std::string> family_notes;
    if (auto n = f.optional_field("notes"))
      for (auto& note : n->items()) family_notes.push_back(note.as_string());
    for (auto& size : f.field("sizes").items()) {
      CpuInstanceType c;
      c.file = families.file();
      c.family = family;
      c.name = size.field("name").as_string();
      if (c.name.rfind(family + ".", 0) != 0)
        throw size.field("name").error(fmt::format("CPU instance \"{}\" is not in family \"{}\"", c.name, family))
            .hint("an AWS instance name is <family>.<size>, e.g. m5.large in family m5");
      c.description = f.field_or("description", "");
      c.cpu = f.field_or("cpu", "");
      c.vcpus = static_cast<int>(size.field("vcpus").as_positive_int(1 << 12));
      if (c.vcpus % threads_per_core != 0)
        throw size.field("vcpus").error(fmt::format("{} vCPUs are not whole cores of {} threads", c.vcpus, threads_per_core))
            .hint("vcpus = cores x threads_per_core");
      c.cores = c.vcpus / threads_per_core;
      c.host_memory_bytes = positive_quantity(size.field("memory"), Dimension::bytes);
      c.network.bandwidth_bytes_per_s = positive_quantity(size.field("network"), Dimension::bandwidth);
      c.network.latency_s = latency_s;
      c.network.fabric = f.field_or("fabric", "ENA");
      c.burst_bandwidth_bytes_per_s = c.network.bandwidth_bytes_per_s;
      if (auto b = size.optional_field("network_burst")) {
        c.burst_bandwidth_bytes_per_s = positive_quantity(*b, Dimension::bandwidth);
        c.network.burstable = true;
        if (c.burst_bandwidth_bytes_per_s < c.network.bandwidth_bytes_per_s)
          throw b->error("is below the baseline \"network\"").hint("network is the sustained baseline, network_burst the peak");
      }
      if (auto v = size.optional_field("ec2_on_demand")) c.prices.ec2_on_demand = v->as_positive(1e4);
      if (auto v = size.optional_field("sagemaker_on_demand")) c.prices.sagemaker_on_demand = v->as_positive(1e4);
      c.prices.sagemaker_uplift = uplift;
      c.prices.spot_discount = discount;
      c.prices.region = "us-east-1";
      const std::map<std::string, bool> has = {
          {"hardware", true}, {"network", true}, {"network_latency", true},
          {"ec2_on_demand", c.prices.ec2_on_demand.has_value()}, {"sagemaker", c.prices.sagemaker_on_demand.has_value()},
          {"sagemaker_uplift", uplift.has_value()}, {"spot_discount", discount.has_value()}};
      for (const auto& [group, needed] : has) {
        auto it = family_sources.find(group);
        if (needed && it == family_sources.end())
          throw src.error(fmt::format("no source for \"{}\"", group)).hint("name the source id of this field group");
        if (needed) c.sources[group] = it->second;
      }
      derive_prices(c.prices, c.sources);
      c.notes = family_notes;
      size.finish();
      if (out.cpu_instances.count(c.name) || out.instances.count(c.name))
        throw size.field("name").error(fmt::format("instance \"{}\" is defined twice", c.name))
            .hint("instance names must be unique across the catalog");
      out.cpu_order.push_back(c.name);
      out.cpu_instances[c.name] = std::move(c);
    }
    f.finish();
  }
}

struct FileParts {
  std::string name;
  json::Json doc;
};

}  // namespace

std::vector<std::string> split_source_ids(const std::string& ref) { return split(ref, '+'); }

// Dates are ISO: "2026", "2026-09" or "2026-09-24".
bool is_iso_date(const std::string& s) {
  auto digits = [&](size_t from, size_t n) {
    for (size_t i = from; i < from + n; ++i)
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    return true;
  };
  if (s.size() == 4) return digits(0, 4);
  if (s.size() == 7) return digits(0, 4) && s[4] == '-' && digits(5, 2);
  if (s.size() == 10) return digits(0, 4) && s[4] == '-' && digits(5, 2) && s[7] == '-' && digits(8, 2);
  return false;
}


void derive_prices(InstanceType& inst) { derive_prices(inst.prices, inst.sources); }

void derive_prices(Prices& p, std::map<std::string, std::string>& sources) {
  if (!p.sagemaker_on_demand || p.sagemaker_estimated) {
    p.sagemaker_on_demand.reset();
    p.sagemaker_estimated = false;
    sources.erase("sagemaker");
    if (p.ec2_on_demand && p.sagemaker_uplift) {
      p.sagemaker_on_demand = *p.ec2_on_demand * *p.sagemaker_uplift;
      p.sagemaker_estimated = true;
      if (sources.count("sagemaker_uplift")) sources["sagemaker"] = sources.at("sagemaker_uplift");
    }
  }
  if (!p.spot || p.spot_estimated) {
    p.spot.reset();
    p.spot_estimated = false;
    if (p.spot_min && p.spot_max) {
      p.spot = 0.5 * (*p.spot_min + *p.spot_max);
    } else if (p.ec2_on_demand && p.spot_discount) {
      sources.erase("spot");
      p.spot = *p.ec2_on_demand * (1.0 - *p.spot_discount);
      p.spot_estimated = true;
      if (sources.count("spot_discount")) sources["spot"] = sources.at("spot_discount");
    } else {
      sources.erase("spot");
    }
  }
}

ParsedCatalog parse_catalog(std::vector<std::pair<std::string, json::Json>> documents) {
  ParsedCatalog out;
  std::vector<SourceRef> refs;

  // Order instance files by their "order" (then name).
  std::vector<FileParts> parts;
  for (auto& [name, doc] : documents) parts.push_back({name, std::move(doc)});
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < parts.size(); ++i) {
    Reader r(parts[i].doc, parts[i].name);
    if (!r.is_object()) (void)r.entries();  // "must be an object"
    order.emplace_back(r.number_or("order", 1000.0), i);
  }
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return parts[a.second].name < parts[b.second].name;
  });

  // Phase 1: sources and GPUs from every file.
  std::map<std::string, std::string> source_file, gpu_file;
  for (auto& fp : parts) {
    Reader r(fp.doc, fp.name);
    if (auto s = r.optional_field("sources")) {
      for (auto& [id, value] : s->entries()) {
        if (out.sources.count(id))
          throw value.error(fmt::format("source \"{}\" is defined twice (also in {})", id, source_file[id]))
              .hint("source ids must be unique across the catalog");
        out.sources[id] = parse_source(id, value);
        source_file[id] = fp.name;
      }
    }
    if (auto cb = r.optional_field("capacity_blocks")) parse_capacity_blocks(*cb, refs, out);
    if (auto pl = r.optional_field("placement")) parse_placement(*pl, refs, out);
    if (auto rt = r.optional_field("regions")) parse_region_table(*rt, refs, out);
    if (auto sw = r.optional_field("software")) parse_software(*sw, refs, out);
    if (auto g = r.optional_field("gpus")) {
      for (auto& [name, value] : g->entries()) {
        if (out.gpus.count(name))
          throw value.error(fmt::format("GPU \"{}\" is defined twice (also in {})", name, gpu_file[name]))
              .hint("GPU names must be unique across the catalog");
        out.gpus[name] = parse_gpu(name, value, refs);
        gpu_file[name] = fp.name;
      }
    }
  }

  // Phase 2: instances, in family order.
  std::vector<std::string> gpu_names;
  for (const auto& [name, g] : out.gpus) gpu_names.push_back(name);
  std::map<std::string, std::string> instance_file;
  for (const auto& [rank, index] : order) {
    auto& fp = parts[index];
    Reader r(fp.doc, fp.name);
    r.ignore("comment");
    r.ignore("order");
    r.ignore("sources");
    r.ignore("gpus");
    r.ignore("capacity_blocks");
    r.ignore("placement");
    r.ignore("regions");
    r.ignore("software");
    if (auto cpu = r.optional_field("cpu_families")) parse_cpu_families(*cpu, refs, out);
    std::unique_ptr<DefaultsNode> defaults;
    if (auto d = r.optional_field("defaults")) {
      if (!d->is_object()) (void)d->entries();
      defaults = std::make_unique<DefaultsNode>(*d);
      defaults->reader.ignore("notes");
    }
    if (auto list = r.optional_field("instances")) {
      for (auto& item : list->items()) {
        if (!item.is_object()) (void)item.entries();
        item.ignore("notes");
        InstanceType inst = parse_instance(Layered(item, defaults.get()), refs);
        inst.notes = read_notes(item, defaults.get());
        if (!out.gpus.count(inst.gpu)) {
          Reader gpu_reader = item.has("gpu") ? *item.optional_field("gpu") : *defaults->reader.optional_field("gpu");
          throw gpu_reader.error(fmt::format("unknown GPU \"{}\"", inst.gpu)).hint(suggestion(inst.gpu, gpu_names));
        }
        if (out.instances.count(inst.name))
          throw item.field("name").error(fmt::format("instance \"{}\" is defined twice (also in {})", inst.name,
                                                     instance_file[inst.name]))
              .hint("instance names must be unique across the catalog");
        try {
          check_instance(inst);
        } catch (Error& e) {
          e.at(fp.name, item.pointer() + e.pointer());
          throw;
        }
        derive_prices(inst);
        instance_file[inst.name] = fp.name;
        out.instance_order.push_back(inst.name);
        out.instances[inst.name] = std::move(inst);
      }
    } else if (defaults) {
      throw r.error("\"defaults\" without \"instances\"").hint("defaults apply to the instances of the same file");
    }
    if (defaults) defaults->finish();
    r.finish();
  }

  // Every Capacity Block offer names a catalog instance.
  for (size_t i = 0; i < out.capacity_block_offers.size(); ++i)
    if (const auto& o = out.capacity_block_offers[i]; !out.instances.count(o.instance_type))
      throw Error(fmt::format("Capacity Block offer for unknown instance \"{}\"", o.instance_type))
          .at(out.capacity_block_locations[i].first, out.capacity_block_locations[i].second)
          .hint(suggestion(o.instance_type, out.instance_order));

  // Every type of the region table is a catalog instance.
  for (const auto& [type, where] : out.region_locations)
    if (!out.instances.count(type))
      throw Error(fmt::format("region table entry for unknown instance \"{}\"", type))
          .at(where.first, where.second)
          .hint(suggestion(type, out.instance_order));

  // Every referenced source exists and is dated.
  std::vector<std::string> ids;
  for (const auto& [id, s] : out.sources) ids.push_back(id);
  for (const auto& ref : refs) {
    auto it = out.sources.find(ref.id);
    if (it == out.sources.end())
      throw Error(fmt::format("unknown source id \"{}\"", ref.id))
          .at(ref.file, ref.pointer)
          .hint(suggestion(ref.id, ids) + " (sources are defined in the \"sources\" table, sources.json)");
    if (it->second.date.empty())
      throw Error(fmt::format("source \"{}\" has no date", ref.id)).at(ref.file, ref.pointer)
          .hint("give the source a \"date\"");
  }
  return out;
}

}  // namespace trainplan::hw::detail
