#include <catch2/catch.hpp>

#include <array>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/nested/for_each_leaf.hpp"
#include "accel/nested/recursively_apply.hpp"

using accel::DType;
using accel::Tensor;
namespace nested = accel::nested;

namespace {

Tensor full(float v, std::int64_t n = 2) { return Tensor::full({n}, v); }
float first(const Tensor& t) { return t.at<float>({0}); }

struct Batch {  // reflected by Boost.PFR
  Tensor input_ids;
  std::vector<Tensor> extra;
  int step;
};

struct Batch2 {  // an aggregate with a non-tensor field
  Tensor t;
  double scale;
};

class Opaque {  // walked through the customization point
 public:
  Opaque(Tensor a, Tensor b) : a_(std::move(a)), b_(std::move(b)) {}
  const Tensor& a() const { return a_; }
  const Tensor& b() const { return b_; }

 private:
  Tensor a_, b_;
};

template <class T>
struct Pair2 {
  T a, b;
};

}  // namespace

template <>
struct accel::nested::nested_traits<Opaque> {
  template <class F>
  static void for_each(const Opaque& o, F&& f) {
    f(o.a());
    f(o.b());
  }
  template <class F>
  static auto transform(const Opaque&, F&& f) {
    auto ra = f([](const Opaque& o) -> const Tensor& { return o.a(); });
    auto rb = f([](const Opaque& o) -> const Tensor& { return o.b(); });
    if constexpr (std::is_same_v<decltype(ra), Tensor>) {
      return Opaque(ra, rb);
    } else {
      return Pair2<decltype(ra)>{ra, rb};
    }
  }
};

TEST_CASE("recursively_apply rebuilds every container kind with the new leaf type", "[nested]") {
  auto to_float = [](const Tensor& t) { return first(t); };

  std::vector<Tensor> v{full(1), full(2)};
  auto rv = nested::recursively_apply(to_float, v);
  static_assert(std::is_same_v<decltype(rv), std::vector<float>>);
  CHECK(rv == std::vector<float>{1, 2});

  std::list<Tensor> l{full(3), full(4)};
  auto rl = nested::recursively_apply(to_float, l);
  static_assert(std::is_same_v<decltype(rl), std::list<float>>);
  CHECK(rl == std::list<float>{3, 4});

  std::deque<Tensor> dq{full(5)};
  CHECK(nested::recursively_apply(to_float, dq) == std::deque<float>{5});

  std::map<std::string, Tensor> m{{"a", full(1)}, {"b", full(2)}};
  auto rm = nested::recursively_apply(to_float, m);
  static_assert(std::is_same_v<decltype(rm), std::map<std::string, float>>);
  CHECK(rm.at("a") == 1);
  CHECK(rm.at("b") == 2);

  std::unordered_map<std::string, Tensor> um{{"x", full(7)}};
  auto rum = nested::recursively_apply(to_float, um);
  static_assert(std::is_same_v<decltype(rum), std::unordered_map<std::string, float>>);
  CHECK(rum.at("x") == 7);

  std::tuple<Tensor, int, std::string> tup{full(9), 4, "keep"};
  auto rt = nested::recursively_apply(to_float, tup);
  static_assert(std::is_same_v<decltype(rt), std::tuple<float, int, std::string>>);
  CHECK(rt == std::tuple<float, int, std::string>{9.f, 4, "keep"});

  std::pair<Tensor, double> pr{full(2), 0.5};
  auto rp = nested::recursively_apply(to_float, pr);
  static_assert(std::is_same_v<decltype(rp), std::pair<float, double>>);
  CHECK(rp == std::pair<float, double>{2.f, 0.5});

  std::array<Tensor, 3> arr{full(1), full(2), full(3)};
  auto ra = nested::recursively_apply(to_float, arr);
  static_assert(std::is_same_v<decltype(ra), std::array<float, 3>>);
  CHECK(ra == std::array<float, 3>{1, 2, 3});

  std::optional<Tensor> some = full(6), none;
  auto rs = nested::recursively_apply(to_float, some);
  static_assert(std::is_same_v<decltype(rs), std::optional<float>>);
  CHECK(rs == 6.f);
  CHECK_FALSE(nested::recursively_apply(to_float, none).has_value());

  std::variant<Tensor, std::string> var = full(8);
  auto rvar = nested::recursively_apply(to_float, var);
  static_assert(std::is_same_v<decltype(rvar), std::variant<float, std::string>>);
  CHECK(std::get<0>(rvar) == 8.f);
  std::variant<Tensor, std::string> vs = std::string("text");
  CHECK(std::get<1>(nested::recursively_apply(to_float, vs)) == "text");
}

TEST_CASE("recursively_apply result type of a deep structure is computed at compile time", "[nested]") {
  using In = std::map<std::string, std::vector<std::tuple<Tensor, std::optional<Tensor>, int>>>;
  using Out = nested::apply_result_t<float (*)(const Tensor&), const In&>;
  static_assert(
      std::is_same_v<Out, std::map<std::string, std::vector<std::tuple<float, std::optional<float>, int>>>>);

  In in{{"k", {{full(1), full(2), 3}, {full(4), std::nullopt, 5}}}};
  Out out = nested::recursively_apply(first, in);
  CHECK(std::get<0>(out.at("k")[0]) == 1);
  CHECK(std::get<1>(out.at("k")[0]) == 2.f);
  CHECK_FALSE(std::get<1>(out.at("k")[1]).has_value());
  CHECK(std::get<2>(out.at("k")[1]) == 5);
}

TEST_CASE("recursively_apply keeps Tensor leaves as tensors and shares nothing it did not touch", "[nested]") {
  std::vector<std::tuple<Tensor, std::string>> data{{full(1), "a"}, {full(2), "b"}};
  auto out = nested::recursively_apply([](const Tensor& t) { return t.to(DType::f16); }, data);
  static_assert(std::is_same_v<decltype(out), decltype(data)>);
  CHECK(std::get<0>(out[1]).dtype() == DType::f16);
  CHECK(std::get<0>(out[1]).at<float>({0}) == 2.f);
  CHECK(std::get<1>(out[0]) == "a");
}

TEST_CASE("recursively_apply walks parallel structures", "[nested]") {
  std::map<std::string, std::vector<Tensor>> a{{"x", {full(1), full(2)}}, {"y", {full(3)}}};
  std::map<std::string, std::vector<Tensor>> b{{"y", {full(30)}}, {"x", {full(10), full(20)}}};
  auto sum = nested::recursively_apply([](const Tensor& p, const Tensor& q) { return first(p) + first(q); }, a, b);
  CHECK(sum.at("x") == std::vector<float>{11, 22});
  CHECK(sum.at("y") == std::vector<float>{33});

  // Three structures, one of them a tuple with a pass-through element.
  std::tuple<Tensor, int> t1{full(1), 7}, t2{full(2), 8}, t3{full(3), 9};
  auto r = nested::recursively_apply(
      [](const Tensor& x, const Tensor& y, const Tensor& z) { return first(x) * first(y) * first(z); }, t1, t2, t3);
  CHECK(std::get<0>(r) == 6.f);
  CHECK(std::get<1>(r) == 7);  // other leaves come from the first structure

  SECTION("mismatched sizes are a ShapeError") {
    std::vector<Tensor> s1{full(1), full(2)}, s2{full(1)};
    CHECK_THROWS_AS(nested::recursively_apply([](const Tensor&, const Tensor&) { return 0; }, s1, s2),
                    accel::ShapeError);
    std::list<Tensor> l1{full(1)}, l2;
    CHECK_THROWS_AS(nested::recursively_apply([](const Tensor&, const Tensor&) { return 0; }, l1, l2),
                    accel::ShapeError);
  }
  SECTION("missing keys are a KeyError, different map sizes a ShapeError") {
    std::map<std::string, Tensor> m1{{"a", full(1)}}, m2{{"b", full(1)}}, m3;
    CHECK_THROWS_AS(nested::recursively_apply([](const Tensor&, const Tensor&) { return 0; }, m1, m2),
                    accel::KeyError);
    CHECK_THROWS_AS(nested::recursively_apply([](const Tensor&, const Tensor&) { return 0; }, m1, m3),
                    accel::ShapeError);
  }
  SECTION("optional engagement and variant alternatives must agree") {
    std::optional<Tensor> o1 = full(1), o2;
    CHECK_THROWS_AS(nested::recursively_apply([](const Tensor&, const Tensor&) { return 0; }, o1, o2),
                    accel::ShapeError);
    std::variant<Tensor, int> v1 = full(1), v2 = 3;
    CHECK_THROWS_AS(nested::recursively_apply([](const Tensor&, const Tensor&) { return 0; }, v1, v2),
                    accel::ShapeError);
  }
}

TEST_CASE("recursively_apply reflects aggregates with Boost.PFR", "[nested]") {
  Batch b{full(1), {full(2), full(3)}, 42};
  auto same = nested::recursively_apply([](const Tensor& t) { return t.to(DType::bf16); }, b);
  static_assert(std::is_same_v<decltype(same), Batch>);  // leaf types unchanged: same aggregate
  CHECK(same.input_ids.dtype() == DType::bf16);
  CHECK(same.extra[1].at<float>({1}) == 3.f);
  CHECK(same.step == 42);

  auto floats = nested::recursively_apply(first, b);
  static_assert(std::is_same_v<decltype(floats), std::tuple<float, std::vector<float>, int>>);
  CHECK(std::get<1>(floats) == std::vector<float>{2, 3});

  // Parallel aggregates.
  Batch c{full(10), {full(20), full(30)}, 0};
  auto diff = nested::recursively_apply([](const Tensor& x, const Tensor& y) { return first(y) - first(x); }, b, c);
  CHECK(std::get<0>(diff) == 9.f);
  CHECK(std::get<1>(diff) == std::vector<float>{18, 27});
  CHECK(std::get<2>(diff) == 42);
}

TEST_CASE("recursively_apply uses nested_traits for user types", "[nested]") {
  Opaque o(full(1), full(2));
  auto moved = nested::recursively_apply([](const Tensor& t) { return t.to(DType::f64); }, o);
  static_assert(std::is_same_v<decltype(moved), Opaque>);
  CHECK(moved.b().dtype() == DType::f64);
  CHECK(moved.b().at<double>({0}) == 2.0);

  auto vals = nested::recursively_apply(first, std::vector<Opaque>{o, Opaque(full(5), full(6))});
  static_assert(std::is_same_v<decltype(vals), std::vector<Pair2<float>>>);
  CHECK(vals[1].a == 5.f);
  CHECK(vals[1].b == 6.f);

  Opaque p(full(10), full(20));
  auto sums = nested::recursively_apply([](const Tensor& x, const Tensor& y) { return first(x) + first(y); }, o, p);
  CHECK(sums.a == 11.f);
  CHECK(sums.b == 22.f);
  CHECK(nested::count_leaves(std::vector<Opaque>{o, p}) == 4);
}

TEST_CASE("recursively_apply leaf tests and error_on_other_type", "[nested]") {
  std::tuple<int, double, std::string> t{2, 1.5, "s"};
  auto doubled = nested::recursively_apply([](auto x) { return x * 2; }, t, nested::leaf_of<int, double>{});
  CHECK(doubled == std::tuple<int, double, std::string>{4, 3.0, "s"});

  std::vector<std::variant<Tensor, std::string>> mixed{full(1), std::string("oops")};
  CHECK_NOTHROW(nested::recursively_apply(first, mixed));
  try {
    (void)nested::recursively_apply(first, mixed, nested::error_on_other_type);
    FAIL("expected a ValueError");
  } catch (const accel::ValueError& e) {
    CHECK_THAT(e.what(), Catch::Contains("std::__cxx11::basic_string") || Catch::Contains("std::basic_string") ||
                             Catch::Contains("std::string"));
    CHECK_THAT(e.what(), Catch::Contains("unsupported leaf"));
  }
  CHECK_NOTHROW(nested::recursively_apply(first, mixed, nested::error_on_other_type(false)));

  // Compile-time rejection of `mixed` under reject_other_types is proved by
  // tests/compile_fail/nested_reject_other_types.cpp; accepts_all_leaves_v is what it asserts.
  static_assert(!nested::accepts_all_leaves_v<nested::tensor_leaf, decltype(mixed)>);
  static_assert(nested::accepts_all_leaves_v<nested::tensor_leaf, std::map<std::string, std::optional<Batch2>>> == false);
  static_assert(nested::accepts_all_leaves_v<nested::tensor_leaf, std::tuple<std::vector<Tensor>, std::array<Tensor, 2>>>);
  static_assert(nested::accepts_all_leaves_v<nested::leaf_of<Tensor, int>, Batch>);
  std::vector<Tensor> only{full(4)};
  CHECK(nested::recursively_apply(first, only, nested::reject_other_types) == std::vector<float>{4});

}

namespace {
struct f16_only : nested::leaf_test {
  template <class T>
  static constexpr bool matches = nested::tensor_leaf::matches<T>;
  bool operator()(const Tensor& t) const { return t.dtype() == DType::f16; }
};
}  // namespace

TEST_CASE("recursively_apply run-time leaf tests pass rejected leaves through", "[nested]") {
  std::vector<Tensor> v{Tensor::ones({2}, DType::f16), Tensor::ones({2}, DType::i32)};
  auto out = nested::recursively_apply([](const Tensor& t) { return t.to(DType::f32); }, v, f16_only{});
  CHECK(out[0].dtype() == DType::f32);
  CHECK(out[1].is_same(v[1]));
  CHECK_THROWS_AS(
      nested::recursively_apply([](const Tensor& t) { return t.to(DType::f32); }, v, f16_only{}, nested::error_on_other_type),
      accel::ValueError);
}

TEST_CASE("recursively_apply skip_keys copies the listed entries at every level", "[nested]") {
  std::map<std::string, std::map<std::string, Tensor>> m{{"a", {{"keep", full(1)}, {"x", full(2)}}},
                                                          {"keep", {{"y", full(3)}}}};
  auto out = nested::recursively_apply([](const Tensor& t) { return t.to(DType::f16); }, m, nested::skip_keys{"keep"});
  CHECK(out.at("a").at("x").dtype() == DType::f16);
  CHECK(out.at("a").at("keep").is_same(m.at("a").at("keep")));
  CHECK(out.at("keep").at("y").is_same(m.at("keep").at("y")));
  std::map<std::string, Tensor> flat{{"keep", full(1)}};
  CHECK_THROWS_AS(nested::recursively_apply(first, flat, nested::skip_keys{"keep"}), accel::ValueError);
}

TEST_CASE("for_each_leaf visits in order and stops early", "[nested]") {
  std::tuple<std::vector<Tensor>, std::optional<Tensor>, Batch> d{{full(1), full(2)}, full(3), Batch{full(4), {}, 0}};
  std::vector<float> seen;
  CHECK_FALSE(nested::for_each_leaf([&](const Tensor& t) { seen.push_back(first(t)); }, d));
  CHECK(seen == std::vector<float>{1, 2, 3, 4});
  seen.clear();
  CHECK(nested::for_each_leaf([&](const Tensor& t) { seen.push_back(first(t)); return seen.size() == 2; }, d));
  CHECK(seen.size() == 2);
  CHECK(nested::count_leaves(d) == 4);
}

TEST_CASE("recursively_apply departures from Accelerate", "[nested]") {
  // Aggregates are walked (Accelerate passes a dataclass through as one leaf).
  Batch2 b{full(3), 0.5};
  auto firsts = nested::recursively_apply(first, b);
  CHECK(std::get<0>(firsts) == 3.f);
  CHECK(std::get<1>(firsts) == 0.5);
  // An empty optional (Python's None) holds no leaf: it stays empty, and error_on_other_type does
  // not reject it, where Accelerate raises TypeError for None.
  std::vector<std::optional<Tensor>> maybe{full(1), std::nullopt};
  auto out = nested::recursively_apply(first, maybe, nested::error_on_other_type);
  CHECK(out[0] == 1.f);
  CHECK_FALSE(out[1].has_value());
  // Accelerate's TypeError for another leaf is a ValueError.
  std::vector<std::optional<int>> other{3};
  CHECK_THROWS_AS(nested::recursively_apply(first, other, nested::error_on_other_type), accel::ValueError);
  // A map is rebuilt as the same kind of map with the new value type.
  std::unordered_map<std::string, Tensor> m{{"a", full(2)}};
  auto mf = nested::recursively_apply(first, m);
  static_assert(std::is_same_v<decltype(mf), std::unordered_map<std::string, float>>);
  CHECK(mf.at("a") == 2.f);
}
