// DType names and traits, the compile-time twin, and Device / Placement parsing.
#include <catch2/catch.hpp>

#include <type_traits>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"

using namespace accel;

TEST_CASE("dtype names: torch and safetensors spellings parse and print") {
  REQUIRE(dtype_from_string("float16") == DType::f16);
  REQUIRE(dtype_from_string("torch.bfloat16") == DType::bf16);
  REQUIRE(dtype_from_string("BF16") == DType::bf16);
  REQUIRE(dtype_from_string("F8_E4M3") == DType::f8_e4m3fn);
  REQUIRE(dtype_from_string("F8_E5M2") == DType::f8_e5m2);
  REQUIRE(dtype_from_string("torch.float8_e4m3fn") == DType::f8_e4m3fn);
  REQUIRE(dtype_from_string("half") == DType::f16);
  REQUIRE(dtype_from_string("long") == DType::i64);
  REQUIRE(dtype_from_string("bool") == DType::boolean);
  REQUIRE(dtype_from_string("U8") == DType::u8);
  for (const auto& info : dtype_table) {
    REQUIRE(dtype_from_string(info.name) == info.dtype);
    REQUIRE(dtype_from_string(info.safetensors_name) == info.dtype);
    REQUIRE(dtype_from_string(torch_dtype_string(info.dtype)) == info.dtype);
  }
  REQUIRE(torch_dtype_string(DType::bf16) == "torch.bfloat16");
  REQUIRE(safetensors_name(DType::f8_e4m3fn) == "F8_E4M3");
  REQUIRE_FALSE(try_dtype_from_string("float128"));
  REQUIRE_THROWS_AS(dtype_from_string("complex64"), DTypeError);
  REQUIRE_THROWS_WITH(dtype_from_string("xyz"), Catch::Contains("unknown dtype 'xyz'") && Catch::Contains("bfloat16/BF16"));
}

TEST_CASE("dtype traits: sizes, kinds and block sizes") {
  REQUIRE(itemsize(DType::f64) == 8);
  REQUIRE(itemsize(DType::bf16) == 2);
  REQUIRE(itemsize(DType::f8_e5m2) == 1);
  REQUIRE(itemsize(DType::boolean) == 1);
  REQUIRE(is_floating_point(DType::f8_e4m3fn));
  REQUIRE_FALSE(is_floating_point(DType::i8));
  REQUIRE(storage_nbytes(DType::f16, 10) == 20);
  for (const auto& info : dtype_table) REQUIRE(info.block_size == 1);
}

TEST_CASE("dtype_of and cpp_type_t are inverse, and visit_dtype reaches every type") {
  static_assert(dtype_of<float> == DType::f32);
  static_assert(dtype_of<const half> == DType::f16);
  static_assert(dtype_of<bool> == DType::boolean);
  static_assert(std::is_same_v<cpp_type_t<DType::f8_e4m3fn>, float8_e4m3fn>);
  static_assert(!Element<long double>);
  for (const auto& info : dtype_table) {
    const std::size_t size = visit_dtype(info.dtype, [](auto tag) { return sizeof(typename decltype(tag)::type); });
    REQUIRE(size == info.itemsize);
    const DType back = visit_dtype(info.dtype, [](auto tag) { return dtype_of<typename decltype(tag)::type>; });
    REQUIRE(back == info.dtype);
  }
}

TEST_CASE("Device parsing and printing") {
  REQUIRE(Device::parse("cpu") == Device::cpu());
  REQUIRE(Device::parse("meta").is_meta());
  REQUIRE(Device::parse("cuda") == Device::cuda(0));
  REQUIRE(Device::parse("cuda:1") == Device::cuda(1));
  REQUIRE(Device::parse("3") == Device::cuda(3));
  REQUIRE(Device(2) == Device::cuda(2));
  REQUIRE(Device::cuda(1).str() == "cuda:1");
  REQUIRE(Device::cpu().index() == -1);
  REQUIRE_THROWS_AS(Device::parse("disk"), DeviceError);
  REQUIRE_THROWS_WITH(Device::parse("disk"), Catch::Contains("placement"));
  REQUIRE_THROWS_AS(Device::parse("cuda:"), DeviceError);
  REQUIRE_THROWS_AS(Device::parse("cuda:-1"), DeviceError);
  REQUIRE_THROWS_AS(Device::parse("gpu"), DeviceError);
  REQUIRE_THROWS_AS(Device::parse("cuda:1x"), DeviceError);
  REQUIRE_THROWS_AS(Device(-1), DeviceError);
}

TEST_CASE("Placement: GPU index, cpu and disk, as device maps spell them") {
  REQUIRE(Placement::parse("disk").is_disk());
  REQUIRE(Placement::parse("cpu") == Placement::cpu());
  REQUIRE(Placement::parse("0") == Placement(0));
  REQUIRE(Placement::parse("cuda:2") == Placement::gpu(2));
  REQUIRE(Placement(1).str() == "1");
  REQUIRE(Placement::disk().str() == "disk");
  REQUIRE(Placement::disk().device().is_meta());
  REQUIRE(Placement(Device::cuda(3)).index() == 3);
  REQUIRE(Placement::gpu(0) < Placement::cpu());
  REQUIRE_THROWS_AS(Placement::parse("mps"), DeviceError);
}
