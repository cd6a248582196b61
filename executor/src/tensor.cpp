// Tensors, dtype names and host-side value conversion (bf16/f16 rounding).
#include "trainplan/executor/tensor.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainplan/core/error.hpp"

namespace trainplan::executor {

namespace {

constexpr std::array<std::pair<DType, std::string_view>, 5> kDTypeNames = {{
    {DType::f32, "f32"}, {DType::f64, "f64"}, {DType::bf16, "bf16"}, {DType::f16, "f16"}, {DType::i32, "i32"}}};

// float -> bf16 bits, round to nearest even (NaN stays NaN).
uint16_t float_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// float -> IEEE half bits, round to nearest even, with subnormals, overflow to inf.
uint16_t float_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return static_cast<uint16_t>(sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00));
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to >= 65520: inf
  if (abs < 0x38800000) {
    // Subnormal half (or zero): value = m * 2^-24, m in [0, 1024].
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    int exp = static_cast<int>(abs >> 23);
    uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
    int shift = 126 - exp;  // 113 (=127-14) + 13 - exp
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);
  uint32_t e = (rounded >> 23) - 112;  // rebias 127 -> 15
  return static_cast<uint16_t>(sign | (e << 10) | ((rounded >> 13) & 0x3FF));
}
float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [d, n] : kDTypeNames)
    if (d == t) return n;
  TP_ASSERT_MSG(false, "unknown dtype");
}

std::optional<DType> dtype_from_code(uint8_t code) {
  for (const auto& [d, n] : kDTypeNames)
    if (static_cast<uint8_t>(d) == code) return d;
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& [d, n] : kDTypeNames)
    if (n == name) return d;
  return std::nullopt;
}

size_t dtype_size_bytes(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
  }
  TP_ASSERT_MSG(false, "unknown dtype");
}

bool is_floating(DType t) { return t != DType::i32; }

std::string shape_string(const Shape& shape) {
  return fmt::format("({})", fmt::join(shape, ","));
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, size_t offset_bytes, DType dtype, Shape shape)
    : buffer_(std::move(buffer)), offset_bytes_(offset_bytes), dtype_(dtype), shape_(std::move(shape)) {
  TP_ASSERT(buffer_ != nullptr);
  for (int64_t d : shape_)
    if (d < 0) throw Error(fmt::format("tensor dimension must be >= 0, got shape {}", shape_string(shape_)));
  TP_ASSERT_MSG(offset_bytes_ % dtype_size_bytes(dtype_) == 0, "tensor offset not aligned to its element size");
  TP_ASSERT_MSG(offset_bytes_ + size_bytes() <= buffer_->size_bytes(), "tensor view exceeds its buffer");
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? n + i : i;
  TP_ASSERT_MSG(j >= 0 && j < n, "tensor dimension index out of range");
  return shape_[static_cast<size_t>(j)];
}

int64_t Tensor::rows() const {
  int64_t c = cols();
  return c == 0 ? 0 : numel() / c;
}

Tensor Tensor::view(Shape shape) const {
  TP_ASSERT(defined());
  if (shape_numel(shape) != numel())
    throw Error(fmt::format("cannot view a {} tensor as {}: element counts differ", shape_string(shape_),
                            shape_string(shape)));
  return Tensor(buffer_, offset_bytes_, dtype_, std::move(shape));
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TP_ASSERT(defined() && ndim() >= 1);
  if (begin < 0 || end < begin || end > shape_[0])
    throw Error(fmt::format("row range [{}, {}) out of bounds for shape {}", begin, end, shape_string(shape_)));
  Shape s = shape_;
  s[0] = end - begin;
  size_t row_elems = shape_[0] == 0 ? 0 : static_cast<size_t>(numel() / shape_[0]);
  size_t row_bytes = row_elems * dtype_size_bytes(dtype_);
  return Tensor(buffer_, offset_bytes_ + static_cast<size_t>(begin) * row_bytes, dtype_, std::move(s));
}

Tensor Tensor::flat(int64_t begin, int64_t end) const {
  TP_ASSERT(defined());
  if (begin < 0 || end < begin || end > numel())
    throw Error(fmt::format("element range [{}, {}) out of bounds for {} elements", begin, end, numel()));
  return Tensor(buffer_, offset_bytes_ + static_cast<size_t>(begin) * dtype_size_bytes(dtype_), dtype_,
                {end - begin});
}

void* Tensor::data() const {
  TP_ASSERT(defined());
  return static_cast<std::byte*>(buffer_->data()) + offset_bytes_;
}

bool Tensor::overlaps(const Tensor& other) const {
  if (!defined() || !other.defined() || buffer_ != other.buffer_) return false;
  size_t a0 = offset_bytes_, a1 = a0 + size_bytes();
  size_t b0 = other.offset_bytes_, b1 = b0 + other.size_bytes();
  return a0 < b1 && b0 < a1;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return fmt::format("{} {}", dtype_name(dtype_), shape_string(shape_));
}

std::vector<std::byte> encode_values(DType dtype, std::span<const double> values) {
  std::vector<std::byte> out(values.size() * dtype_size_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    std::byte* p = out.data() + i * dtype_size_bytes(dtype);
    switch (dtype) {
      case DType::f32: { float f = static_cast<float>(values[i]); std::memcpy(p, &f, 4); break; }
      case DType::f64: std::memcpy(p, &values[i], 8); break;
      case DType::bf16: { uint16_t h = float_to_bf16(static_cast<float>(values[i])); std::memcpy(p, &h, 2); break; }
      case DType::f16: { uint16_t h = float_to_f16(static_cast<float>(values[i])); std::memcpy(p, &h, 2); break; }
      case DType::i32: throw Error("encode_values: i32 tensors hold ids; use upload_ids");
    }
  }
  return out;
}

std::vector<double> decode_values(DType dtype, std::span<const std::byte> bytes) {
  size_t n = bytes.size() / dtype_size_bytes(dtype);
  TP_ASSERT(n * dtype_size_bytes(dtype) == bytes.size());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const std::byte* p = bytes.data() + i * dtype_size_bytes(dtype);
    switch (dtype) {
      case DType::f32: { float f; std::memcpy(&f, p, 4); out[i] = f; break; }
      case DType::f64: std::memcpy(&out[i], p, 8); break;
      case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = bf16_to_float(h); break; }
      case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = f16_to_float(h); break; }
      case DType::i32: throw Error("decode_values: i32 tensors hold ids; use download_ids");
    }
  }
  return out;
}

double round_to(DType dtype, double value) {
  double v[1] = {value};
  return decode_values(dtype, encode_values(dtype, v))[0];
}

}  // namespace trainplan::executor
