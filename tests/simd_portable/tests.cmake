# The conversion kernels in a build without -march flags, the way users compile the headers: the
# run-time dispatch must still reach the CPU's best kernels, with the scalar rounding's bits.
# Its own Catch2 runner too, so nothing in the program is built for this machine's ISA.
add_executable(accel_test_simd_portable
  ${CMAKE_CURRENT_LIST_DIR}/portable_dispatch.cpp ${PROJECT_SOURCE_DIR}/tests/catch_main.cpp)
target_link_libraries(accel_test_simd_portable PRIVATE Catch2::Catch2 accel::accel)
target_include_directories(accel_test_simd_portable PRIVATE ${PROJECT_SOURCE_DIR}/tests/core)
target_compile_options(accel_test_simd_portable PRIVATE -Wall -Wextra -O2)
add_test(NAME simd_portable COMMAND accel_test_simd_portable)
