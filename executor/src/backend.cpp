// The backend-independent half of Backend: memory accounting, copies with conversion, and
// the argument checks every kernel shares (so each backend implements only the math).
#include "trainplan/executor/backend.hpp"

#include <chrono>
#include <cmath>
#include <mutex>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"

namespace trainplan::executor {

struct Backend::MemoryCounters {
  std::mutex mutex;
  size_t live_bytes = 0;
  size_t peak_bytes = 0;
};

namespace {

// Argument checks of one kernel call; errors read "<kernel>: <argument> <problem>".
class Args {
 public:
  Args(const Backend& backend, std::string_view kernel) : backend_(backend), kernel_(kernel) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(fmt::format("{}: {}", kernel_, message));
  }

  // A defined tensor of this backend.
  const Tensor& tensor(const Tensor& t, std::string_view arg) const {
    if (!t.defined()) fail(fmt::format("{} is required but undefined", arg));
    if (t.buffer()->backend_name() != backend_.name())
      fail(fmt::format("{} lives on backend \"{}\", not \"{}\"", arg, t.buffer()->backend_name(), backend_.name()));
    return t;
  }
  // A floating tensor in a dtype this backend computes in.
  const Tensor& floating(const Tensor& t, std::string_view arg) const {
    tensor(t, arg);
    if (!is_floating(t.dtype())) fail(fmt::format("{} must be a floating tensor, got {}", arg, t.describe()));
    if (!backend_.supports(t.dtype()))
      throw Error(fmt::format("{}: {} is {}, which the {} backend does not compute in", kernel_, arg,
                              t.describe(), backend_.name()))
          .hint(backend_.name() == "cpu" ? "the cpu reference backend computes in f32 or f64; bf16/f16 are "
                                           "storage types of the cuda backend"
                                         : "use a dtype the backend supports");
    return t;
  }
  const Tensor& ids(const Tensor& t, std::string_view arg) const {
    tensor(t, arg);
    if (t.dtype() != DType::i32) fail(fmt::format("{} must be an i32 tensor of ids, got {}", arg, t.describe()));
    return t;
  }
  // A floating matrix of rows x cols (rows = product of the leading dimensions).
  void matrix(const Tensor& t, std::string_view arg, int64_t rows, int64_t cols, std::string_view what) const {
    floating(t, arg);
    if (t.rows() != rows || t.cols() != cols)
      fail(fmt::format("{} has shape {}, expected {} rows x {} columns {}", arg, shape_string(t.shape()), rows,
                       cols, what));
  }
  // A weight of exactly two dimensions (out, in).
  void weight(const Tensor& t, std::string_view arg, int64_t out, int64_t in, std::string_view what) const {
    floating(t, arg);
    if (t.ndim() != 2 || t.dim(0) != out || t.dim(1) != in)
      fail(fmt::format("{} has shape {}, expected ({},{}) {}", arg, shape_string(t.shape()), out, in, what));
  }
  void numel(const Tensor& t, std::string_view arg, int64_t n, std::string_view what) const {
    if (t.numel() != n)
      fail(fmt::format("{} has {} elements (shape {}), expected {} {}", arg, t.numel(), shape_string(t.shape()), n,
                       what));
  }
  void floating_numel(const Tensor& t, std::string_view arg, int64_t n, std::string_view what) const {
    floating(t, arg);
    numel(t, arg, n, what);
  }
  void ids_numel(const Tensor& t, std::string_view arg, int64_t n, std::string_view what) const {
    ids(t, arg);
    numel(t, arg, n, what);
  }
  // An output must not share memory with an input.
  void disjoint(const Tensor& out, std::string_view out_arg, const Tensor& in, std::string_view in_arg) const {
    if (out.overlaps(in)) fail(fmt::format("{} must not overlap {}", out_arg, in_arg));
  }
  // Elementwise kernels allow an output to be exactly an input, but not a partial overlap.
  void exact_or_disjoint(const Tensor& out, std::string_view out_arg, const Tensor& in,
                         std::string_view in_arg) const {
    if (out.overlaps(in) && !(out.same_data(in) && out.size_bytes() == in.size_bytes()))
      fail(fmt::format("{} partially overlaps {} (only exact in-place use is allowed)", out_arg, in_arg));
  }

 private:
  const Backend& backend_;
  std::string_view kernel_;
};

}  // namespace

Backend::Backend() : memory_(std::make_shared<MemoryCounters>()) {}
Backend::~Backend() = default;

std::shared_ptr<Buffer> Backend::allocate(size_t size_bytes) {
  std::unique_ptr<Buffer> raw = allocate_impl(size_bytes);
  TP_ASSERT(raw != nullptr && raw->size_bytes() == size_bytes);
  {
    std::lock_guard lock(memory_->mutex);
    memory_->live_bytes += size_bytes;
    memory_->peak_bytes = std::max(memory_->peak_bytes, memory_->live_bytes);
  }
  // The deleter keeps the counters alive, so a tensor may outlive its backend's bookkeeping.
  std::shared_ptr<MemoryCounters> counters = memory_;
  return std::shared_ptr<Buffer>(raw.release(), [counters, size_bytes](Buffer* b) {
    {
      std::lock_guard lock(counters->mutex);
      counters->live_bytes -= size_bytes;
    }
    delete b;
  });
}

Tensor Backend::empty(DType dtype, const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) throw Error(fmt::format("empty: negative dimension in shape {}", shape_string(shape)));
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size_bytes(dtype);
  return Tensor(allocate(bytes), 0, dtype, shape);
}

Tensor Backend::zeros(Stream& stream, DType dtype, const Shape& shape) {
  Tensor t = empty(dtype, shape);
  if (dtype == DType::i32) {
    std::vector<int32_t> z(static_cast<size_t>(t.numel()), 0);
    upload_ids(stream, t, z);
  } else {
    fill(stream, t, 0.0);
  }
  return t;
}

size_t Backend::allocated_bytes() const {
  std::lock_guard lock(memory_->mutex);
  return memory_->live_bytes;
}
size_t Backend::peak_allocated_bytes() const {
  std::lock_guard lock(memory_->mutex);
  return memory_->peak_bytes;
}
void Backend::reset_peak() {
  std::lock_guard lock(memory_->mutex);
  memory_->peak_bytes = memory_->live_bytes;
}

double Backend::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- copies ------------------------------------------------------------------------------------

void Backend::upload(Stream& stream, const Tensor& dst, std::span<const std::byte> host) {
  Args a(*this, "upload");
  a.tensor(dst, "dst");
  if (host.size() != dst.size_bytes())
    a.fail(fmt::format("host data has {} bytes, dst {} has {}", host.size(), dst.describe(), dst.size_bytes()));
  if (!host.empty()) upload_impl(stream, dst, host.data());
}

void Backend::download(Stream& stream, std::span<std::byte> host, const Tensor& src) {
  Args a(*this, "download");
  a.tensor(src, "src");
  if (host.size() != src.size_bytes())
    a.fail(fmt::format("host space has {} bytes, src {} has {}", host.size(), src.describe(), src.size_bytes()));
  if (!host.empty()) download_impl(stream, host.data(), src);
}

void Backend::copy(Stream& stream, const Tensor& dst, const Tensor& src) {
  Args a(*this, "copy");
  a.tensor(dst, "dst");
  a.tensor(src, "src");
  if (dst.dtype() != src.dtype() || dst.numel() != src.numel())
    a.fail(fmt::format("dst {} and src {} differ in dtype or element count", dst.describe(), src.describe()));
  a.disjoint(dst, "dst", src, "src");
  if (dst.numel() > 0) copy_impl(stream, dst, src);
}

void Backend::upload_values(Stream& stream, const Tensor& dst, std::span<const double> values) {
  Args a(*this, "upload_values");
  a.tensor(dst, "dst");
  if (!is_floating(dst.dtype())) a.fail(fmt::format("dst must be floating, got {}", dst.describe()));
  if (static_cast<int64_t>(values.size()) != dst.numel())
    a.fail(fmt::format("{} values for dst {}", values.size(), dst.describe()));
  std::vector<std::byte> bytes = encode_values(dst.dtype(), values);
  upload(stream, dst, bytes);
  synchronize(stream);
}

void Backend::upload_ids(Stream& stream, const Tensor& dst, std::span<const int32_t> ids) {
  Args a(*this, "upload_ids");
  a.ids(dst, "dst");
  if (static_cast<int64_t>(ids.size()) != dst.numel()) a.fail(fmt::format("{} ids for dst {}", ids.size(), dst.describe()));
  upload(stream, dst, std::as_bytes(ids));
  synchronize(stream);
}

std::vector<double> Backend::download_values(Stream& stream, const Tensor& src) {
  Args a(*this, "download_values");
  a.tensor(src, "src");
  if (!is_floating(src.dtype())) a.fail(fmt::format("src must be floating, got {}", src.describe()));
  std::vector<std::byte> bytes(src.size_bytes());
  download(stream, bytes, src);
  synchronize(stream);
  return decode_values(src.dtype(), bytes);
}

std::vector<int32_t> Backend::download_ids(Stream& stream, const Tensor& src) {
  Args a(*this, "download_ids");
  a.ids(src, "src");
  std::vector<int32_t> ids(static_cast<size_t>(src.numel()));
  download(stream, std::as_writable_bytes(std::span<int32_t>(ids)), src);
  synchronize(stream);
  return ids;
}

// ---- elementwise -------------------------------------------------------------------------------

void Backend::fill(Stream& s, const Tensor& x, double value) {
  Args(*this, "fill").floating(x, "x");
  if (x.numel() > 0) fill_impl(s, x, value);
}

void Backend::add(Stream& s, const Tensor& out, const Tensor& a, const Tensor& b) {
  Args c(*this, "add");
  c.floating(a, "a");
  c.floating_numel(b, "b", a.numel(), "(as a)");
  c.floating_numel(out, "out", a.numel(), "(as a)");
  c.exact_or_disjoint(out, "out", a, "a");
  c.exact_or_disjoint(out, "out", b, "b");
  if (out.numel() > 0) add_impl(s, out, a, b);
}

void Backend::accumulate(Stream& s, const Tensor& y, const Tensor& x) {
  Args c(*this, "accumulate");
  c.floating(y, "y");
  c.floating_numel(x, "x", y.numel(), "(as y)");
  c.disjoint(y, "y", x, "x");
  if (y.numel() > 0) accumulate_impl(s, y, x);
}

// ---- embedding ---------------------------------------------------------------------------------

void Backend::embedding_forward(Stream& s, const Tensor& out, const Tensor& ids, const Tensor& table,
                                int64_t row_begin, bool accumulate) {
  Args a(*this, "embedding_forward");
  a.floating(table, "table");
  if (table.ndim() != 2) a.fail(fmt::format("table must be (rows, C), got {}", shape_string(table.shape())));
  a.ids(ids, "ids");
  a.matrix(out, "out", ids.numel(), table.dim(1), "(N ids x C of table)");
  if (row_begin < 0) a.fail(fmt::format("row_begin must be >= 0, got {}", row_begin));
  a.disjoint(out, "out", table, "table");
  a.disjoint(out, "out", ids, "ids");
  if (out.numel() > 0) embedding_forward_impl(s, out, ids, table, row_begin, accumulate);
}

void Backend::embedding_backward(Stream& s, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                                 int64_t row_begin) {
  Args a(*this, "embedding_backward");
  a.floating(dtable, "dtable");
  if (dtable.ndim() != 2) a.fail(fmt::format("dtable must be (rows, C), got {}", shape_string(dtable.shape())));
  a.ids(ids, "ids");
  a.matrix(dout, "dout", ids.numel(), dtable.dim(1), "(N ids x C of dtable)");
  if (row_begin < 0) a.fail(fmt::format("row_begin must be >= 0, got {}", row_begin));
  a.disjoint(dtable, "dtable", dout, "dout");
  if (dout.numel() > 0) embedding_backward_impl(s, dtable, dout, ids, row_begin);
}

// ---- normalization -----------------------------------------------------------------------------

void Backend::layernorm_forward(Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                const Tensor& inp, const Tensor& weight, const Tensor& bias, double eps) {
  Args a(*this, "layernorm_forward");
  a.floating(inp, "inp");
  int64_t n = inp.rows(), c = inp.cols();
  a.matrix(out, "out", n, c, "(as inp)");
  a.floating_numel(weight, "weight", c, "(C)");
  if (bias.defined()) a.floating_numel(bias, "bias", c, "(C)");
  a.floating_numel(mean, "mean", n, "(N rows of inp)");
  a.floating_numel(rstd, "rstd", n, "(N rows of inp)");
  if (!(eps >= 0)) a.fail(fmt::format("eps must be >= 0, got {}", eps));
  for (const auto* o : {&out, &mean, &rstd}) a.disjoint(*o, "an output", inp, "inp");
  a.disjoint(mean, "mean", rstd, "rstd");
  a.disjoint(out, "out", mean, "mean");
  a.disjoint(out, "out", rstd, "rstd");
  if (n > 0) layernorm_forward_impl(s, out, mean, rstd, inp, weight, bias, eps);
}

void Backend::layernorm_backward(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                 const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd) {
  Args a(*this, "layernorm_backward");
  a.floating(inp, "inp");
  int64_t n = inp.rows(), c = inp.cols();
  a.matrix(dinp, "dinp", n, c, "(as inp)");
  a.matrix(dout, "dout", n, c, "(as inp)");
  a.floating_numel(weight, "weight", c, "(C)");
  a.floating_numel(dweight, "dweight", c, "(C)");
  if (dbias.defined()) a.floating_numel(dbias, "dbias", c, "(C)");
  a.floating_numel(mean, "mean", n, "(N)");
  a.floating_numel(rstd, "rstd", n, "(N)");
  for (const auto* in : {&dout, &inp, &weight, &mean, &rstd}) {
    a.disjoint(dinp, "dinp", *in, "an input");
    a.disjoint(dweight, "dweight", *in, "an input");
    a.disjoint(dbias, "dbias", *in, "an input");
  }
  if (n > 0) layernorm_backward_impl(s, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}

void Backend::rmsnorm_forward(Stream& s, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                              const Tensor& weight, double eps) {
  Args a(*this, "rmsnorm_forward");
  a.floating(inp, "inp");
  int64_t n = inp.rows(), c = inp.cols();
  a.matrix(out, "out", n, c, "(as inp)");
  a.floating_numel(weight, "weight", c, "(C)");
  a.floating_numel(rstd, "rstd", n, "(N rows of inp)");
  if (!(eps >= 0)) a.fail(fmt::format("eps must be >= 0, got {}", eps));
  a.disjoint(out, "out", inp, "inp");
  a.disjoint(rstd, "rstd", inp, "inp");
  a.disjoint(out, "out", rstd, "rstd");
  if (n > 0) rmsnorm_forward_impl(s, out, rstd, inp, weight, eps);
}

void Backend::rmsnorm_backward(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                               const Tensor& inp, const Tensor& weight, const Tensor& rstd) {
  Args a(*this, "rmsnorm_backward");
  a.floating(inp, "inp");
  int64_t n = inp.rows(), c = inp.cols();
  a.matrix(dinp, "dinp", n, c, "(as inp)");
  a.matrix(dout, "dout", n, c, "(as inp)");
  a.floating_numel(weight, "weight", c, "(C)");
  a.floating_numel(dweight, "dweight", c, "(C)");
  a.floating_numel(rstd, "rstd", n, "(N)");
  for (const auto* in : {&dout, &inp, &weight, &rstd}) {
    a.disjoint(dinp, "dinp", *in, "an input");
    a.disjoint(dweight, "dweight", *in, "an input");
  }
  if (n > 0) rmsnorm_backward_impl(s, dinp, dweight, dout, inp, weight, rstd);
}

// ---- linear ------------------------------------------------------------------------------------

namespace {
void check_linear_forward(Args& a, const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  a.floating(inp, "inp");
  a.floating(weight, "weight");
  if (weight.ndim() != 2) a.fail(fmt::format("weight must be (OC, IC), got {}", shape_string(weight.shape())));
  int64_t n = inp.rows(), ic = inp.cols(), oc = weight.dim(0);
  a.weight(weight, "weight", oc, ic, "(OC, IC = columns of inp)");
  a.matrix(out, "out", n, oc, "(N rows of inp x OC rows of weight)");
  if (bias.defined()) a.floating_numel(bias, "bias", oc, "(OC)");
  for (const auto* in : {&inp, &weight, &bias}) a.disjoint(out, "out", *in, "an input");
}
void check_linear_backward(Args& a, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                           const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  a.floating(inp, "inp");
  a.floating(weight, "weight");
  if (weight.ndim() != 2) a.fail(fmt::format("weight must be (OC, IC), got {}", shape_string(weight.shape())));
  int64_t n = inp.rows(), ic = inp.cols(), oc = weight.dim(0);
  a.weight(weight, "weight", oc, ic, "(OC, IC = columns of inp)");
  a.matrix(dout, "dout", n, oc, "(N rows of inp x OC)");
  if (dinp.defined()) a.matrix(dinp, "dinp", n, ic, "(as inp)");
  if (dweight.defined()) a.weight(dweight, "dweight", oc, ic, "(as weight)");
  if (dbias.defined()) a.floating_numel(dbias, "dbias", oc, "(OC)");
  for (const auto* in : {&dout, &inp, &weight}) {
    a.disjoint(dinp, "dinp", *in, "an input");
    a.disjoint(dweight, "dweight", *in, "an input");
    a.disjoint(dbias, "dbias", *in, "an input");
  }
  a.disjoint(dinp, "dinp", dweight, "dweight");
}
}  // namespace

void Backend::linear_forward(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                             const Tensor& bias) {
  Args a(*this, "linear_forward");
  check_linear_forward(a, out, inp, weight, bias);
  if (out.numel() > 0) linear_forward_impl(s, out, inp, weight, bias);
}

void Backend::linear_backward(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                              const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  Args a(*this, "linear_backward");
  check_linear_backward(a, dinp, dweight, dbias, dout, inp, weight);
  linear_backward_impl(s, dinp, dweight, dbias, dout, inp, weight);
}

void Backend::linear_residual_forward(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                      const Tensor& bias, const Tensor& residual) {
  Args a(*this, "linear_residual_forward");
  check_linear_forward(a, out, inp, weight, bias);
  a.matrix(residual, "residual", out.rows(), out.cols(), "(as out)");
  a.exact_or_disjoint(out, "out", residual, "residual");
  if (out.numel() > 0) linear_residual_forward_impl(s, out, inp, weight, bias, residual);
}

void Backend::linear_gelu_forward(Stream& s, const Tensor& out, const Tensor& pre, const Tensor& inp,
                                  const Tensor& weight, const Tensor& bias) {
  Args a(*this, "linear_gelu_forward");
  check_linear_forward(a, pre, inp, weight, bias);
  a.matrix(out, "out", pre.rows(), pre.cols(), "(as pre)");
  for (const auto* in : {&pre, &inp, &weight, &bias}) a.disjoint(out, "out", *in, "an input or pre");
  if (out.numel() > 0) linear_gelu_forward_impl(s, out, pre, inp, weight, bias);
}

void Backend::linear_backward_gelu(Stream& s, const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                   const Tensor& dout, const Tensor& act, const Tensor& weight, const Tensor& pre) {
  Args a(*this, "linear_backward_gelu");
  if (!dpre.defined()) a.fail("dpre must be a tensor (the gradient of the GELU's input)");
  check_linear_backward(a, dpre, dweight, dbias, dout, act, weight);
  a.matrix(pre, "pre", act.rows(), act.cols(), "(as act)");
  for (const auto* out : {&dpre, &dweight, &dbias}) a.disjoint(*out, "an output", pre, "pre");
  linear_backward_gelu_impl(s, dpre, dweight, dbias, dout, act, weight, pre);
}

void Backend::linear_residual_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                           const Tensor& bias, const Tensor& residual) {
  if (out.same_data(residual)) {  // in place: the product goes to a temporary first
    const Tensor product = empty(out.dtype(), out.shape());
    linear_forward_impl(s, product, inp, weight, bias);
    add_impl(s, out, product, residual);
    return;
  }
  linear_forward_impl(s, out, inp, weight, bias);
  add_impl(s, out, out, residual);
}

void Backend::linear_gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& pre, const Tensor& inp,
                                       const Tensor& weight, const Tensor& bias) {
  linear_forward_impl(s, pre, inp, weight, bias);
  gelu_forward_impl(s, out, pre);
}

void Backend::linear_backward_gelu_impl(Stream& s, const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                        const Tensor& dout, const Tensor& act, const Tensor& weight,
                                        const Tensor& pre) {
  linear_backward_impl(s, dpre, dweight, dbias, dout, act, weight);
  if (dpre.numel() > 0) gelu_backward_impl(s, dpre, pre, dpre);  // in place: dpre holds dout W
}

// ---- activations -------------------------------------------------------------------------------

namespace {
void check_unary(const Args& a, const Tensor& out, const Tensor& inp) {
  a.floating(inp, "inp");
  a.floating_numel(out, "out", inp.numel(), "(as inp)");
  a.exact_or_disjoint(out, "out", inp, "inp");
}
void check_unary_backward(const Args& a, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  a.floating(inp, "inp");
  a.floating_numel(dout, "dout", inp.numel(), "(as inp)");
  a.floating_numel(dinp, "dinp", inp.numel(), "(as inp)");
  a.exact_or_disjoint(dinp, "dinp", dout, "dout");
  a.exact_or_disjoint(dinp, "dinp", inp, "inp");
}
}  // namespace

void Backend::gelu_forward(Stream& s, const Tensor& out, const Tensor& inp) {
  check_unary(Args(*this, "gelu_forward"), out, inp);
  if (out.numel() > 0) gelu_forward_impl(s, out, inp);
}
void Backend::gelu_backward(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check_unary_backward(Args(*this, "gelu_backward"), dinp, inp, dout);
  if (dinp.numel() > 0) gelu_backward_impl(s, dinp, inp, dout);
}
void Backend::relu_forward(Stream& s, const Tensor& out, const Tensor& inp) {
  check_unary(Args(*this, "relu_forward"), out, inp);
  if (out.numel() > 0) relu_forward_impl(s, out, inp);
}
void Backend::relu_backward(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check_unary_backward(Args(*this, "relu_backward"), dinp, inp, dout);
  if (dinp.numel() > 0) relu_backward_impl(s, dinp, inp, dout);
}

void Backend::swiglu_forward(Stream& s, const Tensor& out, const Tensor& inp) {
  Args a(*this, "swiglu_forward");
  a.floating(inp, "inp");
  if (inp.cols() % 2 != 0) a.fail(fmt::format("inp must be (N, 2F) [gate | up], got {}", shape_string(inp.shape())));
  a.matrix(out, "out", inp.rows(), inp.cols() / 2, "(N, F = half the columns of inp)");
  a.disjoint(out, "out", inp, "inp");
  if (out.numel() > 0) swiglu_forward_impl(s, out, inp);
}

void Backend::swiglu_backward(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Args a(*this, "swiglu_backward");
  a.floating(inp, "inp");
  if (inp.cols() % 2 != 0) a.fail(fmt::format("inp must be (N, 2F) [gate | up], got {}", shape_string(inp.shape())));
  a.matrix(dout, "dout", inp.rows(), inp.cols() / 2, "(N, F = half the columns of inp)");
  a.matrix(dinp, "dinp", inp.rows(), inp.cols(), "(as inp)");
  a.disjoint(dinp, "dinp", inp, "inp");
  a.disjoint(dinp, "dinp", dout, "dout");
  if (dinp.numel() > 0) swiglu_backward_impl(s, dinp, inp, dout);
}

// ---- attention ---------------------------------------------------------------------------------

namespace {
void check_attention_shape(const Args& a, const AttentionShape& sh) {
  if (sh.batch < 1 || sh.seq < 1 || sh.heads < 1 || sh.kv_heads < 1 || sh.head_dim < 1)
    a.fail(fmt::format("batch, seq, heads, kv_heads and head_dim must be >= 1, got {}, {}, {}, {}, {}", sh.batch,
                       sh.seq, sh.heads, sh.kv_heads, sh.head_dim));
  if (sh.heads % sh.kv_heads != 0)
    a.fail(fmt::format("heads ({}) must be a multiple of kv_heads ({})", sh.heads, sh.kv_heads));
}
}  // namespace

void Backend::attention_forward(Stream& s, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                const AttentionShape& shape) {
  Args a(*this, "attention_forward");
  check_attention_shape(a, shape);
  a.matrix(qkv, "qkv", shape.tokens(), shape.qkv_cols(), "(B*T, (H + 2*KVH) * D)");
  a.matrix(out, "out", shape.tokens(), shape.out_cols(), "(B*T, H*D)");
  a.floating_numel(lse, "lse", shape.batch * shape.heads * shape.seq, "(B, H, T)");
  a.disjoint(out, "out", qkv, "qkv");
  a.disjoint(lse, "lse", qkv, "qkv");
  a.disjoint(out, "out", lse, "lse");
  attention_forward_impl(s, out, lse, qkv, shape);
}

void Backend::attention_backward(Stream& s, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                 const Tensor& out, const Tensor& lse, const AttentionShape& shape) {
  Args a(*this, "attention_backward");
  check_attention_shape(a, shape);
  a.matrix(qkv, "qkv", shape.tokens(), shape.qkv_cols(), "(B*T, (H + 2*KVH) * D)");
  a.matrix(dqkv, "dqkv", shape.tokens(), shape.qkv_cols(), "(B*T, (H + 2*KVH) * D)");
  a.matrix(dout, "dout", shape.tokens(), shape.out_cols(), "(B*T, H*D)");
  a.matrix(out, "out", shape.tokens(), shape.out_cols(), "(B*T, H*D)");
  a.floating_numel(lse, "lse", shape.batch * shape.heads * shape.seq, "(B, H, T)");
  for (const auto* in : {&dout, &qkv, &out, &lse}) a.disjoint(dqkv, "dqkv", *in, "an input");
  attention_backward_impl(s, dqkv, dout, qkv, out, lse, shape);
}

void Backend::rotary(Stream& s, const Tensor& out, const Tensor& inp, const AttentionShape& shape, double theta,
                     bool inverse) {
  Args a(*this, "rotary");
  check_attention_shape(a, shape);
  if (shape.head_dim % 2 != 0) a.fail(fmt::format("head_dim must be even, got {}", shape.head_dim));
  if (!(theta > 1)) a.fail(fmt::format("theta must be > 1, got {}", theta));
  a.matrix(inp, "inp", shape.tokens(), shape.qkv_cols(), "(B*T, (H + 2*KVH) * D)");
  a.matrix(out, "out", shape.tokens(), shape.qkv_cols(), "(B*T, (H + 2*KVH) * D)");
  if (!out.same_data(inp)) a.disjoint(out, "out", inp, "inp");
  rotary_impl(s, out, inp, shape, theta, inverse);
}

// ---- cross-entropy -----------------------------------------------------------------------------

void Backend::ce_local_max(Stream& s, const Tensor& max, const Tensor& logits) {
  Args a(*this, "ce_local_max");
  a.floating(logits, "logits");
  if (logits.cols() < 1) a.fail("logits must have at least one vocabulary column");
  a.floating_numel(max, "max", logits.rows(), "(N rows of logits)");
  a.disjoint(max, "max", logits, "logits");
  if (max.numel() > 0) ce_local_max_impl(s, max, logits);
}

void Backend::ce_local_sum_exp(Stream& s, const Tensor& sum_exp, const Tensor& logits, const Tensor& max) {
  Args a(*this, "ce_local_sum_exp");
  a.floating(logits, "logits");
  a.floating_numel(max, "max", logits.rows(), "(N rows of logits)");
  a.floating_numel(sum_exp, "sum_exp", logits.rows(), "(N rows of logits)");
  a.disjoint(sum_exp, "sum_exp", logits, "logits");
  a.disjoint(sum_exp, "sum_exp", max, "max");
  if (sum_exp.numel() > 0) ce_local_sum_exp_impl(s, sum_exp, logits, max);
}

void Backend::ce_local_target_logit(Stream& s, const Tensor& target_logit, const Tensor& logits,
                                    const Tensor& targets, int64_t vocab_begin) {
  Args a(*this, "ce_local_target_logit");
  a.floating(logits, "logits");
  a.ids_numel(targets, "targets", logits.rows(), "(N rows of logits)");
  a.floating_numel(target_logit, "target_logit", logits.rows(), "(N rows of logits)");
  if (vocab_begin < 0) a.fail(fmt::format("vocab_begin must be >= 0, got {}", vocab_begin));
  a.disjoint(target_logit, "target_logit", logits, "logits");
  a.disjoint(target_logit, "target_logit", targets, "targets");
  if (target_logit.numel() > 0) ce_local_target_logit_impl(s, target_logit, logits, targets, vocab_begin);
}

void Backend::ce_combine(Stream& s, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                         const Tensor& target_logit) {
  Args a(*this, "ce_combine");
  a.floating(max, "max");
  a.floating_numel(sum_exp, "sum_exp", max.numel(), "(as max)");
  a.floating_numel(target_logit, "target_logit", max.numel(), "(as max)");
  a.floating_numel(losses, "losses", max.numel(), "(as max)");
  a.exact_or_disjoint(losses, "losses", max, "max");
  a.exact_or_disjoint(losses, "losses", sum_exp, "sum_exp");
  a.exact_or_disjoint(losses, "losses", target_logit, "target_logit");
  if (losses.numel() > 0) ce_combine_impl(s, losses, max, sum_exp, target_logit);
}

void Backend::ce_backward(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                          int64_t vocab_begin, const Tensor& max, const Tensor& sum_exp, double dloss_scale) {
  Args a(*this, "ce_backward");
  a.floating(logits, "logits");
  a.matrix(dlogits, "dlogits", logits.rows(), logits.cols(), "(as logits)");
  a.ids_numel(targets, "targets", logits.rows(), "(N rows of logits)");
  a.floating_numel(max, "max", logits.rows(), "(N rows of logits)");
  a.floating_numel(sum_exp, "sum_exp", logits.rows(), "(N rows of logits)");
  if (vocab_begin < 0) a.fail(fmt::format("vocab_begin must be >= 0, got {}", vocab_begin));
  if (!std::isfinite(dloss_scale)) a.fail(fmt::format("dloss_scale must be finite, got {}", dloss_scale));
  a.exact_or_disjoint(dlogits, "dlogits", logits, "logits");
  for (const auto* in : {&targets, &max, &sum_exp}) a.disjoint(dlogits, "dlogits", *in, "an input");
  if (dlogits.numel() > 0) ce_backward_impl(s, dlogits, logits, targets, vocab_begin, max, sum_exp, dloss_scale);
}

void Backend::cross_entropy_forward(Stream& s, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                                    const Tensor& logits, const Tensor& targets) {
  ce_local_max(s, max, logits);
  ce_local_sum_exp(s, sum_exp, logits, max);
  // losses holds the target logits until ce_combine overwrites them in place.
  ce_local_target_logit(s, losses, logits, targets, 0);
  ce_combine(s, losses, max, sum_exp, losses);
}

// ---- optimizer ---------------------------------------------------------------------------------

void Backend::sum_squares(Stream& s, const Tensor& out, const Tensor& x) {
  Args a(*this, "sum_squares");
  a.floating(x, "x");
  a.floating_numel(out, "out", 1, "(one element)");
  a.disjoint(out, "out", x, "x");
  sum_squares_impl(s, out, x);
}

void Backend::clip_scale(Stream& s, const Tensor& scale, const Tensor& sum_squares, double max_norm) {
  Args a(*this, "clip_scale");
  a.floating_numel(scale, "scale", 1, "(one element)");
  a.floating_numel(sum_squares, "sum_squares", 1, "(one element)");
  if (std::isnan(max_norm)) a.fail("max_norm is NaN");
  clip_scale_impl(s, scale, sum_squares, max_norm);
}

void Backend::adamw_step(Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                         const Tensor& scale, const AdamWConfig& c, int64_t step, const Tensor& model_copy) {
  Args a(*this, "adamw_step");
  a.floating(params, "params");
  int64_t p = params.numel();
  a.floating_numel(grads, "grads", p, "(as params)");
  a.floating_numel(m, "m", p, "(as params)");
  a.floating_numel(v, "v", p, "(as params)");
  a.floating_numel(scale, "scale", 1, "(one element)");
  if (m.dtype() != params.dtype() || v.dtype() != params.dtype())
    a.fail(fmt::format("m ({}) and v ({}) must have the dtype of params ({})", dtype_name(m.dtype()),
                       dtype_name(v.dtype()), dtype_name(params.dtype())));
  if (model_copy.defined()) a.floating_numel(model_copy, "model_copy", p, "(as params)");
  if (step < 1) a.fail(fmt::format("step must be >= 1 (bias correction), got {}", step));
  if (!(c.learning_rate >= 0) || !(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1) ||
      !(c.eps > 0) || !(c.weight_decay >= 0))
    a.fail(fmt::format("invalid AdamW config: learning_rate {} (>= 0), beta1 {} and beta2 {} (in [0, 1)), eps {} "
                       "(> 0), weight_decay {} (>= 0)",
                       c.learning_rate, c.beta1, c.beta2, c.eps, c.weight_decay));
  const Tensor* all[] = {&params, &grads, &m, &v, &scale, &model_copy};
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = i + 1; j < 6; ++j) a.disjoint(*all[i], "an adamw tensor", *all[j], "another");
  if (p > 0) adamw_step_impl(s, params, grads, m, v, scale, c, step, model_copy);
}

// ---- mixture of experts -------------------------------------------------------------------------

namespace {
[[noreturn]] void no_moe_kernel(const Backend& b, std::string_view kernel) {
  throw Error(fmt::format("{}: the {} backend has no mixture-of-experts kernel; router, moe_dispatch and moe_combine "
                          "run on the CPU backend",
                          kernel, b.name()))
      .hint("execute MoE models with --backend cpu");
}
}  // namespace

void Backend::router_forward_impl(Stream&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_moe_kernel(*this, "router_forward");
}
void Backend::router_backward_impl(Stream&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_moe_kernel(*this, "router_backward");
}
void Backend::moe_combine_forward_impl(Stream&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_moe_kernel(*this, "moe_combine_forward");
}
void Backend::moe_combine_backward_impl(Stream&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&) {
  no_moe_kernel(*this, "moe_combine_backward");
}

void Backend::router_forward(Stream& s, const Tensor& weights, const Tensor& experts, const Tensor& probs,
                             const Tensor& logits) {
  Args a(*this, "router_forward");
  a.floating(logits, "logits");
  const int64_t n = logits.rows(), e = logits.cols();
  a.matrix(probs, "probs", n, e, "(as logits)");
  a.floating(weights, "weights");
  const int64_t k = weights.cols();
  a.matrix(weights, "weights", n, k, "(N rows of logits x k)");
  a.ids_numel(experts, "experts", n * k, "(N x k, as weights)");
  if (k < 1 || k > e) a.fail(fmt::format("top-k {} (the columns of weights) must be in [1, {}] experts", k, e));
  a.disjoint(probs, "probs", logits, "logits");
  a.disjoint(weights, "weights", logits, "logits");
  a.disjoint(weights, "weights", probs, "probs");
  if (n > 0) router_forward_impl(s, weights, experts, probs, logits);
}

void Backend::router_backward(Stream& s, const Tensor& dlogits, const Tensor& dweights, const Tensor& weights,
                              const Tensor& experts, const Tensor& probs) {
  Args a(*this, "router_backward");
  a.floating(probs, "probs");
  const int64_t n = probs.rows(), e = probs.cols();
  a.floating(weights, "weights");
  const int64_t k = weights.cols();
  a.matrix(weights, "weights", n, k, "(N rows of probs x k)");
  a.matrix(dweights, "dweights", n, k, "(as weights)");
  a.matrix(dlogits, "dlogits", n, e, "(as probs)");
  a.ids_numel(experts, "experts", n * k, "(N x k, as weights)");
  for (const auto* in : {&dweights, &weights, &probs}) a.disjoint(dlogits, "dlogits", *in, "an input");
  if (n > 0) router_backward_impl(s, dlogits, dweights, weights, experts, probs);
}

void Backend::moe_combine_forward(Stream& s, const Tensor& out, const Tensor& y, const Tensor& weights,
                                  const Tensor& rows) {
  Args a(*this, "moe_combine_forward");
  a.floating(y, "y");
  a.floating(weights, "weights");
  const int64_t n = weights.rows(), k = weights.cols(), c = y.cols();
  a.matrix(out, "out", n, c, "(N rows of weights x C columns of y)");
  a.ids_numel(rows, "rows", n * k, "(N x k, as weights)");
  a.disjoint(out, "out", y, "y");
  a.disjoint(out, "out", weights, "weights");
  if (out.numel() > 0) moe_combine_forward_impl(s, out, y, weights, rows);
}

void Backend::moe_combine_backward(Stream& s, const Tensor& dy, const Tensor& dweights, const Tensor& dout,
                                   const Tensor& y, const Tensor& weights, const Tensor& rows) {
  Args a(*this, "moe_combine_backward");
  a.floating(y, "y");
  a.floating(weights, "weights");
  const int64_t n = weights.rows(), k = weights.cols(), c = y.cols();
  a.matrix(dout, "dout", n, c, "(N rows of weights x C columns of y)");
  a.matrix(dy, "dy", y.rows(), c, "(as y)");
  a.matrix(dweights, "dweights", n, k, "(as weights)");
  a.ids_numel(rows, "rows", n * k, "(N x k, as weights)");
  for (const auto* in : {&dout, &y, &weights}) {
    a.disjoint(dy, "dy", *in, "an input");
    a.disjoint(dweights, "dweights", *in, "an input");
  }
  a.disjoint(dy, "dy", dweights, "dweights");
  if (dy.numel() > 0 || dweights.numel() > 0) moe_combine_backward_impl(s, dy, dweights, dout, y, weights, rows);
}

}  // namespace trainplan::executor
