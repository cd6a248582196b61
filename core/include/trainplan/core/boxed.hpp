// File: trainplan/core/boxed.hpp
//
// An optional value kept on the heap: std::optional's interface (test, *, ->, value(), reset(),
// assignment from a T, a std::optional<T> or std::nullopt) in one pointer. For large members
// that most objects lack: a plan search keeps ~10^5 candidates, of which a few dozen carry a
// simulated step or a whole-job outcome, so holding those inline would cost each candidate
// their full size. Copies are deep (value semantics, like std::optional).
//
//   Boxed<SimulatedStep> sim;          // empty, 8 bytes
//   sim = simulate_candidate(...);     // one allocation
//   if (sim) use(sim->step_time_s);
#pragma once

#include <memory>
#include <optional>
#include <utility>

namespace trainplan {

template <typename T>
class Boxed {
 public:
  Boxed() noexcept = default;
  Boxed(std::nullopt_t) noexcept {}  // NOLINT(google-explicit-constructor): as std::optional
  Boxed(const T& v) : p_(std::make_unique<T>(v)) {}  // NOLINT(google-explicit-constructor)
  Boxed(T&& v) : p_(std::make_unique<T>(std::move(v))) {}  // NOLINT(google-explicit-constructor)
  Boxed(const std::optional<T>& v) : p_(v ? std::make_unique<T>(*v) : nullptr) {}  // NOLINT(google-explicit-constructor)
  Boxed(std::optional<T>&& v) : p_(v ? std::make_unique<T>(std::move(*v)) : nullptr) {}  // NOLINT(google-explicit-constructor)
  Boxed(const Boxed& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Boxed(Boxed&&) noexcept = default;
  ~Boxed() = default;

  Boxed& operator=(const Boxed& o) {
    if (this != &o) assign(o.p_.get());
    return *this;
  }
  Boxed& operator=(Boxed&&) noexcept = default;
  Boxed& operator=(std::nullopt_t) noexcept {
    p_.reset();
    return *this;
  }
  Boxed& operator=(const T& v) {
    assign(&v);
    return *this;
  }
  Boxed& operator=(T&& v) {
    if (p_) *p_ = std::move(v);
    else p_ = std::make_unique<T>(std::move(v));
    return *this;
  }
  Boxed& operator=(const std::optional<T>& v) {
    assign(v ? &*v : nullptr);
    return *this;
  }
  Boxed& operator=(std::optional<T>&& v) {
    if (!v) p_.reset();
    else *this = std::move(*v);
    return *this;
  }

  explicit operator bool() const noexcept { return p_ != nullptr; }
  bool has_value() const noexcept { return p_ != nullptr; }
  T& operator*() noexcept { return *p_; }
  const T& operator*() const noexcept { return *p_; }
  T* operator->() noexcept { return p_.get(); }
  const T* operator->() const noexcept { return p_.get(); }
  const T& value() const {
    if (!p_) throw std::bad_optional_access();
    return *p_;
  }
  T& value() {
    if (!p_) throw std::bad_optional_access();
    return *p_;
  }
  template <typename U>
  T value_or(U&& fallback) const {
    return p_ ? *p_ : static_cast<T>(std::forward<U>(fallback));
  }
  template <typename... Args>
  T& emplace(Args&&... args) {
    p_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *p_;
  }
  void reset() noexcept { p_.reset(); }

 private:
  void assign(const T* v) {
    if (!v) p_.reset();
    else if (p_) *p_ = *v;
    else p_ = std::make_unique<T>(*v);
  }
  std::unique_ptr<T> p_;
};

}  // namespace trainplan
