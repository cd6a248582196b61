// The backend interface on the CPU backend: registry, tensors and buffers, copies and value
// conversion, memory accounting, streams/events/timing, and argument errors.
#include <algorithm>
#include <cstring>
#include <thread>

#include "executor_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using trainplan::executor::testing::Device;

TEST_CASE("backend: the registry always offers the cpu backend", "[executor]") {
  std::vector<std::string> names = backend_names();
  REQUIRE(!names.empty());
  CHECK(names.front() == "cpu");
  std::vector<BackendInfo> infos = backend_infos();
  REQUIRE(infos.size() == names.size());
  CHECK(infos.front().available);
  CHECK(infos.front().description.find("f") != std::string::npos);
  std::unique_ptr<Backend> be = make_backend("cpu");
  CHECK(be->name() == "cpu");
  CHECK(be->supports(DType::f32));
  CHECK(be->supports(DType::f64));
  CHECK_FALSE(be->supports(DType::bf16));
  CHECK_FALSE(be->supports(DType::f16));
}

TEST_CASE("backend: the registry rejects unknown backends with a suggestion", "[executor]") {
  REQUIRE_ERROR_CONTAINS(make_backend("cpuu"), "unknown backend \"cpuu\"");
  REQUIRE_ERROR_CONTAINS(make_backend("cpuu"), "did you mean \"cpu\"");
  REQUIRE_ERROR_CONTAINS(make_backend("cudaa"), "did you mean \"cuda\"");
}

TEST_CASE("backend: dtype names, sizes and parsing round-trip", "[executor]") {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32}) {
    CHECK(parse_dtype(dtype_name(t)) == t);
  }
  CHECK(dtype_size_bytes(DType::f32) == 4);
  CHECK(dtype_size_bytes(DType::f64) == 8);
  CHECK(dtype_size_bytes(DType::bf16) == 2);
  CHECK(dtype_size_bytes(DType::f16) == 2);
  CHECK(dtype_size_bytes(DType::i32) == 4);
  CHECK_FALSE(parse_dtype("fp32").has_value());
}

TEST_CASE("backend: bf16 and f16 encoding rounds to nearest even with known bit patterns", "[executor]") {
  auto bits16 = [](DType t, double v) {
    std::vector<double> one{v};
    std::vector<std::byte> b = encode_values(t, one);
    uint16_t h;
    std::memcpy(&h, b.data(), 2);
    return h;
  };
  CHECK(bits16(DType::bf16, 1.0) == 0x3F80);
  CHECK(bits16(DType::bf16, -2.0) == 0xC000);
  CHECK(bits16(DType::bf16, 1.0 + 1.0 / 256) == 0x3F80);        // tie, even stays
  CHECK(bits16(DType::bf16, 1.0 + 3.0 / 256) == 0x3F82);        // tie, odd rounds up
  CHECK(bits16(DType::bf16, 1.0 + 1.0 / 256 + 1e-6) == 0x3F81);  // above the tie
  CHECK(bits16(DType::f16, 1.0) == 0x3C00);
  CHECK(bits16(DType::f16, 65504.0) == 0x7BFF);                  // largest half
  CHECK(bits16(DType::f16, 65520.0) == 0x7C00);                  // rounds to +inf
  CHECK(bits16(DType::f16, std::ldexp(1.0, -24)) == 0x0001);     // smallest subnormal
  CHECK(bits16(DType::f16, std::ldexp(1.0, -25)) == 0x0000);     // tie to even: zero
  CHECK(bits16(DType::f16, -std::ldexp(1.0, -14)) == 0x8400);    // smallest normal, negative
  CHECK(bits16(DType::f16, 1.0 + 1.0 / 2048) == 0x3C00);         // tie, even stays
  // Decoding inverts encoding on representable values.
  for (DType t : {DType::bf16, DType::f16})
    for (double v : {0.0, 1.0, -3.5, 0.15625, 1024.0}) CHECK(round_to(t, v) == v);
  CHECK(round_to(DType::f32, 0.1) == static_cast<double>(0.1f));
  CHECK(std::abs(round_to(DType::bf16, 3.14159265) - 3.14159265) < 3.14159265 / 128);
}

TEST_CASE("backend: tensors are typed views with row slices, flat ranges and reshapes", "[executor]") {
  Device d;
  Tensor x = d->empty(DType::f32, {4, 3, 5});
  CHECK(x.numel() == 60);
  CHECK(x.size_bytes() == 240);
  CHECK(x.rows() == 12);
  CHECK(x.cols() == 5);
  CHECK(x.dim(-1) == 5);
  CHECK(x.describe() == "f32 (4,3,5)");
  Tensor rows = x.slice_rows(1, 3);
  CHECK(rows.shape() == Shape{2, 3, 5});
  CHECK(rows.offset_bytes() == 60);
  CHECK(rows.overlaps(x));
  CHECK_FALSE(rows.overlaps(x.slice_rows(3, 4)));
  Tensor flat = x.flat(10, 20);
  CHECK(flat.shape() == Shape{10});
  CHECK(flat.offset_bytes() == 40);
  CHECK(x.view({60}).same_data(x));
  REQUIRE_ERROR_CONTAINS(x.view({7, 8}), "element counts differ");
  REQUIRE_ERROR_CONTAINS(x.slice_rows(2, 5), "out of bounds");
  REQUIRE_ERROR_CONTAINS(x.flat(50, 61), "out of bounds");
  CHECK(x.buffer()->host_accessible());
  CHECK(x.buffer()->backend_name() == "cpu");
  CHECK_FALSE(Tensor().defined());
}

TEST_CASE("backend: uploads and downloads round-trip in every dtype", "[executor]") {
  Device d;
  Rng rng(11);
  std::vector<double> v = executor::testing::random_values(rng, 37);
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor x = d.put(t, {37}, v);
    std::vector<double> back = d.get(x);
    for (size_t i = 0; i < v.size(); ++i) CHECK(back[i] == round_to(t, v[i]));
  }
  std::vector<int32_t> ids = executor::testing::random_ids(rng, 19, -5, 1000);
  Tensor t = d.put_ids(ids);
  CHECK(d->download_ids(d.stream, t) == ids);
  // Device-to-device copy and the byte-level interface.
  Tensor a = d.put(DType::f32, {37}, v), b = d->empty(DType::f32, {37});
  d->copy(d.stream, b, a);
  CHECK(d.get(b) == d.get(a));
  std::vector<std::byte> bytes(10);
  REQUIRE_ERROR_CONTAINS(d->download(d.stream, bytes, a), "host space has 10 bytes");
  REQUIRE_ERROR_CONTAINS(d->copy(d.stream, d->empty(DType::f64, {37}), a), "differ in dtype");
  REQUIRE_ERROR_CONTAINS(d->upload_values(d.stream, a, std::vector<double>(3, 1.0)), "3 values for dst f32 (37)");
}

TEST_CASE("backend: the backend counts live and peak device bytes", "[executor]") {
  Device d;
  const size_t base = d->allocated_bytes();
  d->reset_peak();
  {
    Tensor a = d->empty(DType::f32, {1000});
    Tensor b = d->empty(DType::f64, {500});
    CHECK(d->allocated_bytes() == base + 8000);
    Tensor view = a.slice_rows(0, 10);  // views allocate nothing
    CHECK(d->allocated_bytes() == base + 8000);
  }
  CHECK(d->allocated_bytes() == base);
  CHECK(d->peak_allocated_bytes() == base + 8000);
  d->reset_peak();
  CHECK(d->peak_allocated_bytes() == base);
}

TEST_CASE("backend: events time work on a stream with the steady clock", "[executor]") {
  Device d;
  std::unique_ptr<Stream> side = d->create_stream();
  auto start = d->create_event(), stop = d->create_event();
  REQUIRE_ERROR_CONTAINS(d->elapsed_s(*start, *stop), "never recorded");
  const double host_start = Backend::now_s();
  d->record(*start, *side);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Tensor x = d->empty(DType::f32, {1000});
  d->fill(*side, x, 1.5);
  d->record(*stop, *side);
  d->wait(d.stream, *stop);  // the default stream orders after the side stream's work
  d->synchronize(*stop);
  const double host_s = Backend::now_s() - host_start;
  const double device_s = d->elapsed_s(*start, *stop);
  CHECK(device_s >= 0.019);
  CHECK(device_s <= host_s);
  CHECK(d.get(x)[999] == 1.5);
}

namespace {
// A buffer of a pretend backend, to check that kernels refuse foreign memory.
class FakeBuffer final : public Buffer {
 public:
  void* data() const override { return const_cast<double*>(storage_); }
  size_t size_bytes() const override { return sizeof(storage_); }
  bool host_accessible() const override { return false; }
  std::string_view backend_name() const override { return "fake"; }

 private:
  double storage_[8] = {};
};
}  // namespace

TEST_CASE("backend: kernels reject bad shapes, foreign memory and dtypes the backend lacks", "[executor]") {
  Device d;
  Stream& s = d.stream;
  Tensor x = d.zeros({4, 3}), w = d.zeros({5, 3}), out = d.zeros({4, 5});
  d->fill(s, x, 0.5);
  REQUIRE_ERROR_CONTAINS(d->linear_forward(s, out, x, d.zeros({5, 4}), Tensor()),
                         "linear_forward: weight has shape (5,4), expected (5,3)");
  REQUIRE_ERROR_CONTAINS(d->linear_forward(s, d.zeros({4, 6}), x, w, Tensor()), "linear_forward: out has shape (4,6)");
  REQUIRE_ERROR_CONTAINS(d->linear_forward(s, out, x, w, d.zeros({4})), "bias has 4 elements");
  REQUIRE_ERROR_CONTAINS(d->linear_forward(s, out, x, w, Tensor(d.zeros({4, 3}))),
                         "bias has 12 elements");
  // Mixing f32 and f64 in one kernel.
  REQUIRE_ERROR_CONTAINS(d->linear_forward(s, out, d.zeros({4, 3}, DType::f32), w, Tensor()), "one dtype");
  // bf16 is a storage type of GPU backends only.
  Tensor half = d->empty(DType::bf16, {4, 3});
  REQUIRE_ERROR_CONTAINS(d->gelu_forward(s, half, half), "which the cpu backend does not compute in");
  // Ids must be i32, outputs must not overlap inputs.
  REQUIRE_ERROR_CONTAINS(d->embedding_forward(s, out, d.zeros({4}), w, 0, false), "ids must be an i32 tensor");
  REQUIRE_ERROR_CONTAINS(d->layernorm_forward(s, x, d.zeros({4}), d.zeros({4}), x, d.zeros({3}), Tensor(), 1e-5),
                         "must not overlap inp");
  Tensor big = d.zeros({8});
  REQUIRE_ERROR_CONTAINS(d->add(s, big.flat(1, 5), big.flat(0, 4), big.flat(4, 8)), "partially overlaps");
  d->add(s, big.flat(0, 4), big.flat(0, 4), big.flat(4, 8));  // exact in-place is fine
  AttentionShape sh{1, 2, 3, 2, 4, true};
  REQUIRE_ERROR_CONTAINS(d->attention_forward(s, d.zeros({2, 12}), d.zeros({6}), d.zeros({2, 28}), sh),
                         "heads (3) must be a multiple of kv_heads (2)");
  auto fake = std::make_shared<FakeBuffer>();
  Tensor foreign(fake, 0, DType::f64, {8});
  REQUIRE_ERROR_CONTAINS(d->fill(s, foreign, 1.0), "lives on backend \"fake\"");
  REQUIRE_ERROR_CONTAINS(d->adamw_step(s, d.zeros({3}), d.zeros({3}), d.zeros({3}), d.zeros({3}), d.zeros({1}),
                                       AdamWConfig{}, 0, Tensor()),
                         "step must be >= 1");
}
