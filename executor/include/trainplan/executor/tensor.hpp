// File: trainplan/executor/tensor.hpp
//
// Element types, device buffers and tensors of the executor's backends.
//
// A Buffer is a block of device memory owned by one backend; the host may dereference its
// address only when host_accessible() is true (the CPU backend), never for a GPU backend.
// A Tensor is a view on a buffer: byte offset, element type and a row-major (contiguous) shape.
// Tensors are cheap handles (a shared_ptr to the buffer): copying one aliases the same memory,
// and the memory lives as long as any tensor on it.
//
//   std::unique_ptr<Backend> be = make_backend("cpu");
//   Tensor x = be->empty(DType::f32, {8, 64});        // 8 token rows of 64 features
//   Tensor first = x.slice_rows(0, 4);                 // rows [0, 4), same buffer
//   Tensor flat = x.view({512});                       // same memory, other shape
//   x.rows(); x.cols();                                // 8, 64 (rows = numel / last dim)
//
// Values cross between host and device only through Backend::upload / download (explicit,
// stream-ordered copies), so the same code runs on a GPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/core/error.hpp"

namespace trainplan::executor {

/// Element type of a tensor. f32 and f64 are the CPU reference's compute types; bf16/f16 are
/// the storage types of mixed-precision GPU backends; i32 holds token ids and targets.
enum class DType { f32, f64, bf16, f16, i32 };

/// "f32", "f64", "bf16", "f16", "i32".
std::string_view dtype_name(DType t);
/// The DType whose enum value is `code` (as files store it), or nullopt for any other byte.
std::optional<DType> dtype_from_code(uint8_t code);
/// Parses a name of dtype_name(); nullopt otherwise.
std::optional<DType> parse_dtype(std::string_view name);
/// Bytes of one element (4, 8, 2, 2, 4).
size_t dtype_size_bytes(DType t);
/// True for the floating-point types.
bool is_floating(DType t);

/// Row-major shape, outermost dimension first, e.g. {batch, seq, hidden}.
using Shape = std::vector<int64_t>;
/// "(2,3,4)".
std::string shape_string(const Shape& shape);
/// Product of the dimensions (1 for the empty shape, a scalar).
int64_t shape_numel(const Shape& shape);

/// A block of memory owned by a backend. Created by Backend::allocate.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  virtual ~Buffer() = default;

  /// Device address of the first byte; dereferenceable on the host only if host_accessible().
  virtual void* data() const = 0;
  virtual size_t size_bytes() const = 0;
  /// True when the host may read and write data() directly (CPU backend).
  virtual bool host_accessible() const = 0;
  /// Name of the owning backend ("cpu", "cuda"), for error messages and checks.
  virtual std::string_view backend_name() const = 0;
};

/// A typed, contiguous, row-major view on a Buffer. A default-constructed Tensor is
/// "undefined" and stands for an absent optional argument (e.g. no bias).
class Tensor {
 public:
  Tensor() = default;
  /// A view of `shape` elements of `dtype` starting `offset_bytes` into `buffer`; the view
  /// must fit in the buffer and the offset must be a multiple of the element size.
  Tensor(std::shared_ptr<Buffer> buffer, size_t offset_bytes, DType dtype, Shape shape);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  /// Size of dimension `i`; negative `i` counts from the end (-1 is the last dimension).
  int64_t dim(int i) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * dtype_size_bytes(dtype_); }
  /// Length of the last dimension (1 for a scalar). Kernels treat a tensor as a matrix of
  /// rows() x cols(): token rows by features.
  int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }
  /// numel() / cols(): the product of all leading dimensions.
  int64_t rows() const;

  /// The same memory with another shape of equal numel.
  Tensor view(Shape shape) const;
  /// Rows [begin, end) of the outermost dimension (a contiguous sub-range).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  /// Elements [begin, end) of the flattened tensor, as a 1-D tensor.
  Tensor flat(int64_t begin, int64_t end) const;

  /// Device address of the first element (see Buffer::data()).
  void* data() const;
  /// data() as T*; asserts that T matches dtype() (float/f32, double/f64, int32_t/i32).
  template <class T>
  T* data_as() const;

  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t offset_bytes() const { return offset_bytes_; }
  /// True when both views start at the same address (used to allow documented aliasing).
  bool same_data(const Tensor& other) const { return defined() && other.defined() && data() == other.data(); }
  /// True when the byte ranges of the two tensors intersect.
  bool overlaps(const Tensor& other) const;
  /// "f32 (8,64)", or "undefined".
  std::string describe() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_bytes_ = 0;
  DType dtype_ = DType::f32;
  Shape shape_;
};

/// The DType of a C++ element type: float -> f32, double -> f64, int32_t -> i32.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }

template <class T>
T* Tensor::data_as() const {
  TP_ASSERT_MSG(defined() && dtype_ == dtype_of<T>(), "tensor element type does not match the requested C++ type");
  return static_cast<T*>(data());
}

/// Host-side conversion between doubles and the bytes of a floating dtype (bf16 and f16 round
/// to nearest, ties to even). Used by uploads and downloads of every backend.
std::vector<std::byte> encode_values(DType dtype, std::span<const double> values);
std::vector<double> decode_values(DType dtype, std::span<const std::byte> bytes);
/// One value rounded to the precision of `dtype` (identity for f64).
double round_to(DType dtype, double value);

}  // namespace trainplan::executor
