// The binary form objects travel in: round trips of every kind it knows, and damaged bytes.
#include <catch2/catch.hpp>

#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "dist_fixture.hpp"

using namespace accel_dist_test;
namespace dist = accel::dist;

namespace {
enum class Colour : std::uint16_t { red = 3, blue = 500 };
struct Item {
  std::int8_t a = 0;
  Colour c = Colour::red;
  friend bool operator==(const Item&, const Item&) = default;
};
struct Message {
  std::string name;
  std::vector<Item> items;
  std::map<std::string, std::vector<double>> table;
  std::optional<std::uint64_t> maybe;
  std::variant<int, std::string> either;
  std::tuple<bool, float, std::pair<char, std::deque<int>>> misc;
  std::array<std::int16_t, 3> fixed{};
  std::list<std::set<int>> nested;
  std::unordered_map<int, std::vector<bool>> bits;
  friend bool operator==(const Message&, const Message&) = default;
};

template <class T>
T round_trip(const T& x) {
  return dist::deserialize<T>(dist::serialize(x));
}
}  // namespace

TEST_CASE("serialize round-trips the kinds it documents", "[dist]") {
  const Message o{"name\0with nul",
                {{-3, Colour::blue}, {127, Colour::red}},
                {{"k", {1.5, -0.0, 1e300}}},
                42,
                std::string("text"),
                {true, 0.25f, {'x', {1, 2, 3}}},
                {-1, 0, 32767},
                {{1, 2}, {}},
                {{5, {true, false, true}}}};
  CHECK(round_trip(o) == o);
  CHECK(round_trip(std::string()) == "");
  CHECK(round_trip(std::optional<int>{}) == std::nullopt);
  CHECK(round_trip(std::vector<std::string>{"a", "", "ccc"}) == std::vector<std::string>{"a", "", "ccc"});
}

TEST_CASE("serialize carries tensors of every dtype, meta and undefined ones", "[dist]") {
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d));
    const Tensor t = sample(d, 2, Shape{2, 3}).transpose(0, 1);  // written contiguous
    const Tensor back = round_trip(t);
    CHECK(back.dtype() == d);
    CHECK(back.shape() == Shape{3, 2});
    CHECK(values(back) == values(t));
  }
  const Tensor meta = round_trip(Tensor::empty(Shape{4, 5}, DType::bf16, Device::meta()));
  CHECK(meta.is_meta());
  CHECK(meta.shape() == Shape{4, 5});
  CHECK_FALSE(round_trip(Tensor()).defined());
  CHECK(round_trip(Tensor::zeros(Shape{0, 3})).shape() == Shape{0, 3});
}

TEST_CASE("deserialize refuses damaged bytes and other types", "[dist]") {
  auto bytes = dist::serialize(std::vector<std::int32_t>{1, 2, 3});
  CHECK_THROWS_AS(dist::deserialize<std::vector<std::int64_t>>(bytes), accel::DistributedError);
  CHECK_THROWS_WITH(dist::deserialize<std::string>(bytes), Catch::Contains("another type than"));
  auto truncated = bytes;
  truncated.pop_back();
  CHECK_THROWS_AS(dist::deserialize<std::vector<std::int32_t>>(truncated), accel::FormatError);
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_THROWS_WITH(dist::deserialize<std::vector<std::int32_t>>(longer), Catch::Contains("1 bytes follow"));
  auto bad_magic = bytes;
  bad_magic[0] = std::byte{'X'};
  CHECK_THROWS_WITH(dist::deserialize<std::vector<std::int32_t>>(bad_magic), Catch::Contains("magic"));
  // A count far beyond the bytes is refused before anything is allocated.
  auto huge = bytes;
  const std::uint64_t claim = std::uint64_t{1} << 60;
  std::memcpy(huge.data() + 16, &claim, sizeof claim);
  CHECK_THROWS_WITH(dist::deserialize<std::vector<std::int32_t>>(huge), Catch::Contains("claims"));
  // A tensor whose extents claim more than its bytes.
  auto t = dist::serialize(Tensor::zeros(Shape{2}, DType::f32));
  auto tb = t;
  const std::size_t extent_at = 16 + 1 + 8 + 3 + 4;  // header, state, dtype "F32", rank
  const std::int64_t big = std::int64_t{1} << 40;
  std::memcpy(tb.data() + extent_at, &big, sizeof big);
  CHECK_THROWS_AS(dist::deserialize<Tensor>(tb), accel::FormatError);
  bool flag = true;
  auto b = dist::serialize(flag);
  b.back() = std::byte{2};
  CHECK_THROWS_WITH(dist::deserialize<bool>(b), Catch::Contains("a bool holds 2"));
}
