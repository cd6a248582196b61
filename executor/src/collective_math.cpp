// Collective arithmetic and argument checks (collective_math.hpp).
#include "collective_math.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::executor::comm {

std::string_view coll_name(CollKind k) {
  switch (k) {
    case CollKind::all_reduce: return "all_reduce";
    case CollKind::reduce_scatter: return "reduce_scatter";
    case CollKind::all_gather: return "all_gather";
    case CollKind::broadcast: return "broadcast";
    case CollKind::reduce: return "reduce";
    case CollKind::barrier: return "barrier";
  }
  return "?";
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::vector<std::string> r;
  for (int x : ranks) r.push_back(std::to_string(x));
  return join(r, ",");
}

namespace {

double load(DType t, const void* p, int64_t i) {
  return t == DType::f32 ? static_cast<double>(static_cast<const float*>(p)[i]) : static_cast<const double*>(p)[i];
}
void store(DType t, void* p, int64_t i, double v) {
  if (t == DType::f32)
    static_cast<float*>(p)[i] = static_cast<float>(v);
  else
    static_cast<double*>(p)[i] = v;
}

// out[i] = op over the members' in[m][begin + i], in double, in member order; rounded once.
void reduce_range(DType dtype, ReduceOp op, const std::vector<const void*>& ins, int64_t begin, int64_t count, void* out) {
  for (int64_t i = 0; i < count; ++i) {
    double a = load(dtype, ins[0], begin + i);
    for (size_t m = 1; m < ins.size(); ++m) {
      const double x = load(dtype, ins[m], begin + i);
      a = op == ReduceOp::sum ? a + x : std::max(a, x);
    }
    store(dtype, out, i, a);
  }
}

}  // namespace

int64_t output_numel(CollKind kind, int members, int member, int root_index, int64_t in_numel) {
  switch (kind) {
    case CollKind::all_reduce: return in_numel;
    case CollKind::reduce: return member == root_index ? in_numel : 0;
    case CollKind::reduce_scatter: return in_numel / members;
    case CollKind::all_gather: return in_numel * members;
    case CollKind::broadcast: return member == root_index ? 0 : in_numel;
    case CollKind::barrier: return 0;
  }
  return 0;
}

void run_collective(CollKind kind, ReduceOp op, int root_index, DType dtype, int64_t in_numel,
                    const std::vector<const void*>& ins, const std::vector<void*>& outs) {
  const size_t n = ins.size();
  const size_t elem = dtype_size_bytes(dtype);
  switch (kind) {
    case CollKind::barrier: return;
    case CollKind::all_reduce:
    case CollKind::reduce: {
      // Into a scratch copy first: outputs may alias inputs (in place).
      std::vector<std::byte> acc(static_cast<size_t>(in_numel) * elem);
      reduce_range(dtype, op, ins, 0, in_numel, acc.data());
      for (size_t m = 0; m < n; ++m)
        if (outs[m] && !acc.empty()) std::memcpy(outs[m], acc.data(), acc.size());
      return;
    }
    case CollKind::reduce_scatter: {
      const int64_t k = in_numel / static_cast<int64_t>(n);
      for (size_t j = 0; j < n; ++j)
        if (outs[j]) reduce_range(dtype, op, ins, static_cast<int64_t>(j) * k, k, outs[j]);
      return;
    }
    case CollKind::all_gather: {
      const size_t chunk = static_cast<size_t>(in_numel) * elem;
      for (size_t j = 0; j < n; ++j)
        if (outs[j] && chunk > 0)
          for (size_t m = 0; m < n; ++m) std::memcpy(static_cast<std::byte*>(outs[j]) + m * chunk, ins[m], chunk);
      return;
    }
    case CollKind::broadcast: {
      const size_t bytes = static_cast<size_t>(in_numel) * elem;
      for (size_t m = 0; m < n; ++m)
        if (static_cast<int>(m) != root_index && outs[m] && bytes > 0)
          std::memcpy(outs[m], ins[static_cast<size_t>(root_index)], bytes);
      return;
    }
  }
}

void check_host(const Tensor& t, std::string_view op, std::string_view arg, std::string_view who) {
  if (!t.defined()) throw Error(fmt::format("{}: {} is undefined", op, arg));
  if (!t.buffer()->host_accessible())
    throw Error(fmt::format("{}: {} lives on backend \"{}\", whose memory the {} cannot read", op, arg,
                            t.buffer()->backend_name(), who))
        .hint(fmt::format("the {} moves host-accessible (cpu backend) tensors", who));
}

void check_numeric(const Tensor& t, std::string_view op, std::string_view arg, std::string_view who) {
  check_host(t, op, arg, who);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw Error(fmt::format("{}: {} is {}; the {} reduces f32 and f64", op, arg, t.describe(), who));
}

void check_reduce_scatter(const CommGroup& g, int64_t tag, const Tensor& out, const Tensor& in) {
  if (in.dtype() != out.dtype() || in.numel() != out.numel() * g.size())
    throw Error(fmt::format("reduce_scatter tag {}: in ({}) must hold group size {} x out ({})", tag, in.describe(),
                            g.size(), out.describe()));
  if (in.overlaps(out)) throw Error(fmt::format("reduce_scatter tag {}: out overlaps in", tag));
}

void check_all_gather(const CommGroup& g, int64_t tag, const Tensor& out, const Tensor& in) {
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * g.size())
    throw Error(fmt::format("all_gather tag {}: out ({}) must hold group size {} x in ({})", tag, out.describe(),
                            g.size(), in.describe()));
  if (in.overlaps(out)) throw Error(fmt::format("all_gather tag {}: out overlaps in", tag));
}

}  // namespace trainplan::executor::comm
