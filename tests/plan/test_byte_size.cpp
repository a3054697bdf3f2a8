#include <catch2/catch.hpp>

#include "accel/core/byte_size.hpp"

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
