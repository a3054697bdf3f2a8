#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/checked.hpp"

using namespace accel;

TEST_CASE("convert_file_size_to_int follows Accelerate's units, including bits", "[plan][byte_size]") {
  CHECK(convert_file_size_to_int("100MB") == 100'000'000);
  CHECK(convert_file_size_to_int("2GiB") == 2147483648LL);
  CHECK(convert_file_size_to_int("512KiB") == 524288);
  CHECK(convert_file_size_to_int("1.5GB") == 1'500'000'000);
  CHECK(convert_file_size_to_int("10mb") == 1'250'000);   // lower-case b: bits
  CHECK(convert_file_size_to_int("10Mb") == 1'250'000);
  CHECK(convert_file_size_to_int("10mB") == 10'000'000);
  CHECK(convert_file_size_to_int("10kb") == 1250);
  CHECK(convert_file_size_to_int("5mib") == 5'242'880);   // binary units never mean bits
  CHECK(convert_file_size_to_int("1e3MB") == 1'000'000'000);
  CHECK(convert_file_size_to_int(" 5MB") == 5'000'000);
  CHECK(convert_file_size_to_int("5 MB") == 5'000'000);
  CHECK(convert_file_size_to_int("3.3333MB") == 3'333'300);
  CHECK(convert_file_size_to_int("0.1GB") == 100'000'000);
  CHECK(convert_file_size_to_int("1_000KB") == 1'000'000);
  CHECK(convert_file_size_to_int(std::int64_t{500}) == 500);
  for (const char* bad : {"5MBB", "5k0MB", "-1GB", "5TB", "100", "", "7b", "nanGB", "infGB", "GB", "1__0MB"}) {
    INFO(bad);
    CHECK_THROWS_AS(convert_file_size_to_int(std::string_view(bad)), ValueError);
  }
  CHECK_THROWS_AS(convert_file_size_to_int(std::int64_t{-1}), ValueError);
}

TEST_CASE("dtype_byte_size is exact, with bool = 1/8 byte", "[plan][byte_size]") {
  CHECK(dtype_byte_size(DType::f32) == ByteSize(4));
  CHECK(dtype_byte_size(DType::bf16) == ByteSize(2));
  CHECK(dtype_byte_size(DType::boolean) == ByteSize::from_bits(1));
  CHECK(dtype_byte_size(DType::boolean).bytes() == 0.125);
  CHECK(dtype_byte_size("torch.float16") == ByteSize(2));
  CHECK(dtype_byte_size("complex64") == ByteSize(8));
  CHECK_THROWS_AS(dtype_byte_size("float17"), DTypeError);
  const ByteSize s = dtype_byte_size(DType::boolean) * 4097;
  CHECK(s.str() == "512.125");
  CHECK(s.floor_bytes() == 512);
  CHECK_FALSE(s.is_whole());
  CHECK((s + ByteSize::from_bits(7)).is_whole());
}

TEST_CASE("ByteSize arithmetic refuses to wrap", "[plan][byte_size]") {
  const ByteSize big(max_size_bytes);
  CHECK_THROWS_AS(big + ByteSize(1), OverflowError);
  CHECK_THROWS_AS(big * 2, OverflowError);
  CHECK_THROWS_AS(ByteSize(max_size_bytes + 1), OverflowError);
  CHECK_THROWS_AS(ByteSize::from_bits(INT64_MIN) - ByteSize(1), OverflowError);
  CHECK((big - big) == ByteSize{});
  const std::int64_t extents[] = {1'000'000'000, 1'000'000'000, 100};
  CHECK_THROWS_WITH(checked_numel(extents, "tensor 'w'"), Catch::Contains("tensor 'w'") && Catch::Contains("overflows"));
  const std::int64_t negative[] = {2, -1};
  CHECK_THROWS_AS(checked_numel(negative, "w"), ShapeError);
  CHECK(checked_nbytes(std::vector<int>{2, 3}, 4, "w") == 24);
}

TEST_CASE("parse_byte_size tells an overflowing size from a malformed one", "[plan][byte_size]") {
  CHECK(parse_byte_size("x", "1024") == ByteSize(1024));
  CHECK(parse_byte_size("x", "1.5GiB") == ByteSize(1610612736));
  CHECK(parse_byte_size("x", "10mb") == ByteSize(1'250'000));
  CHECK(size_string_counts_bits("10mb"));
  CHECK(size_string_counts_bits("1.5gb"));
  CHECK_FALSE(size_string_counts_bits("10MB"));
  CHECK_FALSE(size_string_counts_bits("10mib"));
  CHECK_THROWS_WITH(parse_byte_size("--size", "99999999999999999999"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(parse_byte_size("--size", "1e30GB"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(parse_byte_size("--size", "lots"), Catch::Contains("is not a size"));
}
