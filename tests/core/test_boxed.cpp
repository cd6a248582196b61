// Boxed<T>: std::optional's behaviour (the oracle) in one pointer, with deep copies.
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trainplan/core/boxed.hpp"

using namespace trainplan;

namespace {
struct Big {
  std::vector<double> values;
  std::string name;
  double pad[16] = {};
};
}  // namespace

TEST_CASE("boxed: one pointer, and the same answers as std::optional", "[core]") {
  STATIC_REQUIRE(sizeof(Boxed<Big>) == sizeof(void*));
  Boxed<Big> b;
  std::optional<Big> o;
  CHECK(!b);
  CHECK(!b.has_value());
  CHECK_THROWS_AS(b.value(), std::bad_optional_access);
  CHECK_THROWS_AS(o.value(), std::bad_optional_access);
  b = Big{{1.0, 2.0}, "first"};
  o = Big{{1.0, 2.0}, "first"};
  REQUIRE(b);
  CHECK(b->name == o->name);
  CHECK((*b).values == o->values);
  CHECK(b.value().values.size() == 2);
  b = std::optional<Big>{};  // an empty optional empties it
  CHECK(!b);
  b = std::optional<Big>{Big{{3.0}, "third"}};
  REQUIRE(b.has_value());
  CHECK(b->name == "third");
  b = std::nullopt;
  CHECK(!b);
  b.emplace(Big{{4.0}, "fourth"});
  CHECK(b->values.front() == 4.0);
  b.reset();
  CHECK(!b);
  CHECK(Boxed<int>().value_or(7) == 7);
  CHECK(Boxed<int>(3).value_or(7) == 3);
}

TEST_CASE("boxed: copies are deep, moves take the value", "[core]") {
  Boxed<Big> a = Big{{1.0}, "a"};
  Boxed<Big> copy = a;
  copy->name = "changed";
  CHECK(a->name == "a");  // the original is untouched
  Boxed<Big> assigned;
  assigned = a;
  assigned->values.push_back(2.0);
  CHECK(a->values.size() == 1);
  const Boxed<Big>& same = assigned;
  assigned = same;  // self-assignment keeps the value
  CHECK(assigned->values.size() == 2);
  Boxed<Big> empty;
  assigned = empty;  // copying an empty one empties
  CHECK(!assigned);
  Boxed<Big> moved = std::move(a);
  CHECK(moved->name == "a");
  const Big lvalue{{5.0}, "lvalue"};
  moved = lvalue;  // assigning a T into a held value reuses it
  CHECK(moved->name == "lvalue");
  CHECK(lvalue.name == "lvalue");
}
