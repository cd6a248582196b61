// Plan JSON: reading (with field checks and unknown-field rejection) and writing.
#include <fmt/format.h>

#include <algorithm>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/plan/plan.hpp"

#include <span>

namespace trainplan::plan {
namespace {

// Longest amax history accepted: 2^20 steps (the history is 4 bytes per step and tensor;
// TE's default is 1024, Megatron-LM's --fp8-amax-history-len default 1).
constexpr int64_t kMaxAmaxHistory = 1 << 20;

template <typename E>
E parse_enum(const json::Reader& r, std::span<const E> values, std::string_view (*name)(E)) {
  std::vector<std::string> names;
  for (E v : values) names.emplace_back(name(v));
  std::string s = r.as_choice(names);
  for (E v : values)
    if (name(v) == s) return v;
  TP_ASSERT(false);
  return values.front();
}
template <typename E>
E parse_enum(const json::Reader& r, std::initializer_list<E> values, std::string_view (*name)(E)) {
  return parse_enum(r, std::span<const E>(values.begin(), values.size()), name);
}

StageAssignment parse_stage(const json::Reader& r) {
  // Either {"units": [first, last]} or [first, last].
  json::Reader range = r.is_object() ? r.field("units") : r;
  if (r.is_object()) r.finish();
  auto items = range.items();
  if (items.size() != 2)
    throw range.error(fmt::format("must be [first_unit, last_unit], got {} numbers", items.size()))
        .hint("e.g. [0, 12] for layer units 0..12 inclusive");
  StageAssignment s;
  s.first_unit = static_cast<int>(items[0].as_nonnegative_int(limits::kMaxLayers + 2));
  s.last_unit = static_cast<int>(items[1].as_nonnegative_int(limits::kMaxLayers + 2));
  if (s.last_unit < s.first_unit)
    throw range.error(fmt::format("last unit {} comes before first unit {}", s.last_unit, s.first_unit))
        .hint("write [first, last] with first <= last");
  return s;
}

// An AWS region name: lower-case letters, digits and dashes ("eu-west-1"); whether the
// catalog prices it is checked where the catalog is loaded for the plan.
std::string parse_region_name(const json::Reader& f) {
  std::string region = f.as_string();
  const bool well_formed = !region.empty() && region.front() != '-' && region.back() != '-' &&
                           std::all_of(region.begin(), region.end(), [](char ch) {
                             return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-';
                           });
  if (!well_formed)
    throw f.error(fmt::format("\"{}\" is not an AWS region name", region))
        .hint("write e.g. \"eu-west-1\", or leave region out for the catalog's own prices (us-east-1)");
  return region;
}

}  // namespace

Plan parse_plan(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  if (!r.is_object()) throw r.error("a plan must be a JSON object").hint("see plan/README.md for the format");
  Plan p;
  p.schema_version = static_cast<int>(r.field("schema_version").as_positive_int());
  if (p.schema_version != kSchemaVersion)
    throw r.field("schema_version").error(fmt::format("unsupported schema_version {}", p.schema_version))
        .hint(fmt::format("this trainplan reads schema_version {}", kSchemaVersion));
  p.model = r.field("model").as_string();
  if (p.model.empty()) throw r.field("model").error("must not be empty").hint("a catalog name such as \"gpt3-13b\" or a path to config.json");
  if (p.model == "xgboost" && r.has("xgboost"))
    throw r.field("model").error("a classic ML (XGBoost) job file, not a GPU plan")
        .hint("trainplan job FILE estimates it; check, simulate, export and execute take GPU plans");

  auto cluster = r.field("cluster");
  p.instance_type = cluster.field("instance_type").as_string();
  p.instance_count = static_cast<int>(cluster.field("count").as_positive_int(limits::kMaxInstances));
  if (auto f = cluster.optional_field("region")) p.region = parse_region_name(*f);
  cluster.finish();

  auto par = r.field("parallelism");
  p.dp = static_cast<int>(par.field("dp").as_positive_int(limits::kMaxGpus));
  p.tp = static_cast<int>(par.field("tp").as_positive_int(limits::kMaxGpus));
  p.pp = static_cast<int>(par.field("pp").as_positive_int(limits::kMaxGpus));
  if (auto f = par.optional_field("vp")) p.vp = static_cast<int>(f->as_positive_int(limits::kMaxLayers));
  if (auto f = par.optional_field("cp")) p.cp = static_cast<int>(f->as_positive_int(limits::kMaxGpus));
  if (auto f = par.optional_field("ep")) p.ep = static_cast<int>(f->as_positive_int(limits::kMaxGpus));
  // The products below are used as divisors and loop bounds: refuse them before they can
  // overflow an int.
  try {
    const int64_t gpus = checked::multiply(checked::multiply(checked::multiply(p.dp, p.tp, limits::kMaxGpus, "dp*tp"), p.pp,
                                                             limits::kMaxGpus, "dp*tp*pp"),
                                           p.cp, limits::kMaxGpus, "dp*tp*pp*cp");
    (void)gpus;
    checked::multiply(p.pp, p.vp, limits::kMaxLayers, "pp*vp");
  } catch (Error& e) {
    e.at(name, par.pointer().empty() ? "/" : par.pointer());
    throw;
  }
  if (auto f = par.optional_field("zero_stage")) {
    p.zero_stage = static_cast<int>(f->as_nonnegative_int());
    if (p.zero_stage > 3) throw f->error(fmt::format("must be 0, 1, 2 or 3, got {}", p.zero_stage)).hint("ZeRO has stages 0 (off) to 3");
  }
  p.sequence_parallel = par.bool_or("sequence_parallel", false);
  p.sync_batch_norm = par.bool_or("sync_batch_norm", false);
  par.finish();

  auto batch = r.field("batch");
  p.global_batch = batch.field("global_batch").as_positive_int(limits::kMaxBatch);
  p.micro_batch = batch.field("micro_batch").as_positive_int(limits::kMaxBatch);
  if (auto f = batch.optional_field("num_micro_batches")) p.num_micro_batches = f->as_positive_int(limits::kMaxBatch);
  if (auto f = batch.optional_field("seq_len")) p.seq_len = f->as_positive_int(limits::kMaxSeqLen);
  batch.finish();

  if (auto moe = r.optional_field("moe")) {
    if (auto f = moe->optional_field("capacity_factor")) {
      p.moe_capacity_factor = f->as_nonnegative(1e6);
      if (p.moe_capacity_factor > 0 && p.moe_capacity_factor < 1)
        throw f->error(fmt::format("must be 0 (dropless) or at least 1, got {}", p.moe_capacity_factor))
            .hint("an expert holds c * tokens * top_k / num_experts tokens: c < 1 drops tokens even under perfect balance; "
                  "use 0 for dropless routing or a factor such as 1.25");
    }
    if (auto f = moe->optional_field("load_imbalance")) {
      p.moe_load_imbalance = f->as_positive(1e6);
      if (p.moe_load_imbalance < 1)
        throw f->error(fmt::format("must be at least 1, got {}", p.moe_load_imbalance))
            .hint("the busiest expert-parallel rank's tokens over the mean: 1 is perfect balance");
    }
    moe->finish();
  }
  if (auto f = r.optional_field("recompute"))
    p.recompute = parse_enum(*f, {Recompute::none, Recompute::selective, Recompute::full}, recompute_name);
  if (auto f = r.optional_field("schedule"))
    p.schedule = parse_enum(*f, {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b}, schedule_name);
  if (auto f = r.optional_field("attention"))
    p.attention = parse_enum(*f, {AttentionImpl::flash, AttentionImpl::unfused, AttentionImpl::flash1}, attention_impl_name);
  if (auto f = r.optional_field("stages"))
    for (const auto& item : f->items()) p.stages.push_back(parse_stage(item));
  if (auto f = r.optional_field("precision")) {
    auto prec = parse_precision(f->as_choice(precision_names()));
    p.precision = *prec;
  }
  if (auto f = r.optional_field("fp8")) {
    // Only FP8 plans carry the section: a recipe on a bf16 plan would be silently ignored.
    if (p.precision != Precision::fp8)
      throw f->error("an fp8 section in a plan that does not train in fp8")
          .hint("set \"precision\": \"fp8\" or remove the fp8 section");
    if (auto g = f->optional_field("recipe")) p.fp8.recipe = parse_enum(*g, std::span<const Fp8Recipe>(kFp8Recipes), fp8_recipe_name);
    if (auto g = f->optional_field("amax_history")) {
      if (p.fp8.recipe != Fp8Recipe::delayed)
        throw g->error(fmt::format("amax_history applies to the delayed recipe, not {}", fp8_recipe_name(p.fp8.recipe)))
            .hint("remove amax_history (only delayed scaling keeps an amax history)");
      p.fp8.amax_history = static_cast<int>(g->as_positive_int(kMaxAmaxHistory));
    }
    p.fp8.fp8_params = f->bool_or("fp8_params", false);
    f->finish();
  }
  if (auto dpr = r.optional_field("data_parallel")) {
    if (auto f = dpr->optional_field("algorithm"))
      p.dp_algorithm = parse_enum(*f, std::span<const DpAlgorithm>(kDpAlgorithms), dp_algorithm_name);
    if (auto f = dpr->optional_field("bucket_size_bytes")) p.bucket_size_bytes = f->as_positive(limits::kMaxBytes);
    if (auto f = dpr->optional_field("bucket_size")) {
      p.bucket_size_bytes = f->as_quantity(units::Dimension::bytes);
      if (p.bucket_size_bytes <= 0) throw f->error("must be positive").hint("e.g. \"25MB\"");
    }
    p.overlap_grad_reduce = dpr->bool_or("overlap", true);
    if (auto f = dpr->optional_field("grad_reduce")) p.grad_reduce = *parse_precision(f->as_choice({"fp32", "bf16", "fp16"}));
    dpr->finish();
  }
  if (auto ck = r.optional_field("checkpoint")) {
    if (auto f = ck->optional_field("interval_s")) p.checkpoint_interval_s = f->as_nonnegative(limits::kMaxSeconds);
    if (auto f = ck->optional_field("interval")) p.checkpoint_interval_s = f->as_quantity(units::Dimension::duration);
    ck->finish();
  }
  if (auto tr = r.optional_field("training")) {
    if (auto f = tr->optional_field("tokens")) {
      p.training_tokens = f->is_string() ? f->as_quantity(units::Dimension::count) : f->as_nonnegative(limits::kMaxTokens);
    }
    if (auto f = tr->optional_field("purchase")) p.purchase = parse_enum(*f, {Purchase::on_demand, Purchase::spot, Purchase::capacity_block}, purchase_name);
    if (auto f = tr->optional_field("platform")) p.platform = parse_enum(*f, {Platform::ec2, Platform::sagemaker}, platform_name);
    tr->finish();
  }
  if (auto pl = r.optional_field("placement")) {
    if (auto f = pl->optional_field("azs")) p.placement.azs = static_cast<int>(f->as_positive_int(hw::kMaxAzs));
    if (auto f = pl->optional_field("placement_group")) {
      if (f->as_string() != "cluster")
        throw f->error(fmt::format("unknown placement group \"{}\"", f->as_string()))
            .hint("\"cluster\" (one cluster placement group per AZ) is the one modelled");
    }
    pl->finish();
  }
  if (auto d = r.optional_field("data")) {
    if (auto f = d->optional_field("region")) p.data_region = f->as_string();
    if (auto f = d->optional_field("bytes")) p.dataset_bytes = f->as_nonnegative(limits::kMaxBytes);
    if (auto f = d->optional_field("size")) p.dataset_bytes = f->as_quantity(units::Dimension::bytes);
    d->finish();
  }
  if (auto f = r.optional_field("software")) {
    p.software = f->as_string();
    if (p.software.empty()) throw f->error("is empty").hint("name a software stack, e.g. \"megatron-core\" (`trainplan catalog` lists them)");
  }
  if (auto f = r.optional_field("predicted")) p.predicted = f->value();
  r.ignore("comment");
  r.finish();
  return p;
}

Plan read_plan_file(const std::string& path) { return parse_plan(json::parse_file(path), path); }

json::Json to_json(const Plan& p) {
  json::Json j;
  j["schema_version"] = p.schema_version;
  j["model"] = p.model;
  j["cluster"] = {{"instance_type", p.instance_type}, {"count", p.instance_count}};
  if (!p.region.empty()) j["cluster"]["region"] = p.region;  // written when set: plans priced in the catalog's own region never carry it
  if (!p.software.empty()) j["software"] = p.software;
  j["parallelism"] = {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"vp", p.vp}, {"cp", p.cp},
                      {"zero_stage", p.zero_stage}, {"sequence_parallel", p.sequence_parallel}};
  if (p.ep > 1) j["parallelism"]["ep"] = p.ep;  // written when > 1: dense plans never carry it
  if (p.sync_batch_norm) j["parallelism"]["sync_batch_norm"] = true;  // written when set: plans without batch norm never carry it
  json::Json batch = {{"global_batch", p.global_batch}, {"micro_batch", p.micro_batch}};
  if (p.num_micro_batches > 0) batch["num_micro_batches"] = p.num_micro_batches;
  if (p.seq_len > 0) batch["seq_len"] = p.seq_len;
  j["batch"] = batch;
  if (p.moe_capacity_factor != 0 || p.moe_load_imbalance != 1.0)  // written when not the defaults (dropless, balanced)
    j["moe"] = {{"capacity_factor", p.moe_capacity_factor}, {"load_imbalance", p.moe_load_imbalance}};
  j["recompute"] = std::string(recompute_name(p.recompute));
  j["schedule"] = std::string(schedule_name(p.schedule));
  j["attention"] = std::string(attention_impl_name(p.attention));
  if (!p.stages.empty()) {
    json::Json stages = json::Json::array();
    for (const auto& s : p.stages) stages.push_back({s.first_unit, s.last_unit});
    j["stages"] = stages;
  }
  if (p.precision) j["precision"] = std::string(precision_name(*p.precision));
  if (p.precision == Precision::fp8) {
    json::Json fp8 = {{"recipe", std::string(fp8_recipe_name(p.fp8.recipe))}, {"fp8_params", p.fp8.fp8_params}};
    if (p.fp8.recipe == Fp8Recipe::delayed) fp8["amax_history"] = p.fp8.amax_history;
    j["fp8"] = fp8;
  }
  j["data_parallel"] = {{"algorithm", std::string(dp_algorithm_name(p.dp_algorithm))},
                        {"bucket_size_bytes", p.bucket_size_bytes},
                        {"overlap", p.overlap_grad_reduce}};
  if (p.grad_reduce) j["data_parallel"]["grad_reduce"] = std::string(precision_name(*p.grad_reduce));  // written when set
  j["checkpoint"] = {{"interval_s", p.checkpoint_interval_s}};
  j["training"] = {{"tokens", p.training_tokens},
                   {"purchase", std::string(purchase_name(p.purchase))},
                   {"platform", std::string(platform_name(p.platform))}};
  if (p.placement.azs > 1)  // written across AZs; absent = one AZ, one cluster placement group
    j["placement"] = {{"azs", p.placement.azs}, {"placement_group", std::string(hw::placement_group_name(p.placement.group))}};
  if (!p.data_region.empty() || p.dataset_bytes > 0) {
    json::Json data = json::Json::object();
    if (!p.data_region.empty()) data["region"] = p.data_region;
    if (p.dataset_bytes > 0) data["bytes"] = p.dataset_bytes;
    j["data"] = data;
  }
  if (!p.predicted.is_null()) j["predicted"] = p.predicted;
  return j;
}

void write_plan_file(const std::string& path, const Plan& plan) { json::write_file(path, to_json(plan)); }

}  // namespace trainplan::plan
