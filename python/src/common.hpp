// Shared pieces of the bindings: the catalog a call uses, plans given as dict or path, keyword
// arguments onto option structs, and running long calls without the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <functional>
#include <type_traits>
#include <future>
#include <map>
#include <memory>
#include <string>

#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/search_io.hpp"

namespace trainplan::python {

/// A hardware catalog as Python holds it (trainplan.Catalog): the built-in one, or one read
/// from a folder and/or with a price file applied (the CLI's --catalog-dir and --prices).
struct CatalogHandle {
  std::shared_ptr<const hw::Catalog> catalog;
  static CatalogHandle builtin();
};

/// The catalog a call uses: `obj` (a trainplan.Catalog) or, for None, the built-in one.
std::shared_ptr<const hw::Catalog> catalog_of(const pybind11::object& obj);

/// A plan given as a dict (plan JSON), a str or os.PathLike (a plan file). `name` is how it
/// is named in errors and results: the path, or "<plan>" for a dict.
struct LoadedPlan {
  plan::Plan plan;
  std::string name;
};
LoadedPlan load_plan(const pybind11::object& obj);

/// A path argument: str or os.PathLike (pathlib.Path).
bool is_path(const pybind11::handle& obj);
std::string path_of(const pybind11::handle& obj);

/// An option value as the CLI would have it typed: str as is, int and float as numbers,
/// list/tuple joined with ','.
std::string option_text(const pybind11::handle& value, const std::string& option);

/// Setters of one option struct by keyword; unknown keywords are an Error with the closest
/// known name.
template <typename T>
using Setters = std::map<std::string, std::function<void(T&, const pybind11::handle&)>>;
void unknown_keyword(const std::string& name, const std::vector<std::string>& known, const std::string& function);

template <typename T>
void apply_kwargs(T& target, const pybind11::kwargs& kwargs, const Setters<T>& setters, const std::string& function) {
  for (const auto& [k, v] : kwargs) {
    const auto key = k.template cast<std::string>();
    auto it = setters.find(key);
    if (it == setters.end()) {
      std::vector<std::string> known;
      for (const auto& [name, f] : setters) known.push_back(name);
      unknown_keyword(key, known, function);
    }
    it->second(target, v);
  }
}

/// Typed setters: text options (option_text), integers, booleans, lists of text.
template <typename T>
std::function<void(T&, const pybind11::handle&)> text_field(std::string T::*field, const std::string& option) {
  return [field, option](T& t, const pybind11::handle& v) { t.*field = option_text(v, option); };
}
int64_t int_value(const pybind11::handle& value, const std::string& option);
double float_value(const pybind11::handle& value, const std::string& option);
bool bool_value(const pybind11::handle& value, const std::string& option);
// An integer keyword. The option structs hold 64-bit integers, so the library's bound check
// (the CLI flag's) sees the value as given; a negative value for an unsigned field round-trips
// through the cast and is refused there as negative.
template <typename T, typename I>
std::function<void(T&, const pybind11::handle&)> int_field(I T::*field, const std::string& option) {
  static_assert(std::is_integral_v<I> && sizeof(I) == sizeof(int64_t), "integer options are 64-bit");
  return [field, option](T& t, const pybind11::handle& v) { t.*field = static_cast<I>(int_value(v, option)); };
}
template <typename T>
std::function<void(T&, const pybind11::handle&)> bool_field(bool T::*field, const std::string& option) {
  return [field, option](T& t, const pybind11::handle& v) { t.*field = bool_value(v, option); };
}
std::vector<std::string> text_list(const pybind11::handle& value, const std::string& option);

/// Keyword setters of planner::SearchOptions (plan() and report() share them; planning.cpp).
const Setters<planner::SearchOptions>& search_options_setters();

/// Runs `work` with the GIL released. In the main thread, Ctrl-C (SIGINT) sets `cancel` (the
/// work stops early and returns what it has) instead of raising KeyboardInterrupt.
template <typename F>
auto without_gil(F&& work, std::atomic<bool>* cancel = nullptr) {
  pybind11::gil_scoped_release release;
  if (!cancel) return work();
  auto result = std::async(std::launch::async, std::forward<F>(work));
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    pybind11::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      *cancel = true;
    }
  }
  return result.get();
}

}  // namespace trainplan::python
