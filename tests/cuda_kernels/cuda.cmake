# CUDA backend tests, one executable `accel_test_cuda` (ctest name: cuda). Included by
# tests/CMakeLists.txt when ACCEL_CUDA_ENABLED; the GPU cases skip at run time without a GPU.
#
#   test_cuda.cu     the one nvcc translation unit: every kernel and op (ops.cuh), and the
#                    checks that need device-side code, offered through cuda_side.hpp
#   cuda_tests.cpp   the Catch2 cases, compiled by g++ (they include the CPU ops, whose oneDNN
#                    header nvcc 13 rejects in C++20 mode); not named test_*.cpp, so the layer
#                    glob of tests/CMakeLists.txt leaves it alone
# The CUDA language is enabled at the top (cmake/AccelCudaOps.cmake).
if(NOT ACCEL_CUDA_LANGUAGE)
  message(STATUS "accel: no CUDA compiler found; the CUDA kernel tests are not built")
  return()
endif()

# The g++ side, with the project's usual warning / ISA / sanitizer flags.
add_library(accel_test_cuda_cases OBJECT ${CMAKE_CURRENT_LIST_DIR}/cuda_tests.cpp)
target_link_libraries(accel_test_cuda_cases PRIVATE accel::accel Catch2::Catch2 accel_dev_flags)
target_compile_definitions(accel_test_cuda_cases PRIVATE ACCEL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# accel_dev_flags (which accel_catch_main carries) holds g++-only flags (-Wall, ...) that nvcc
# rejects, so the objects are linked in directly rather than through target_link_libraries.
add_executable(accel_test_cuda ${CMAKE_CURRENT_LIST_DIR}/test_cuda.cu
               $<TARGET_OBJECTS:accel_catch_main> $<TARGET_OBJECTS:accel_test_cuda_cases>)
target_link_libraries(accel_test_cuda PRIVATE accel::accel Catch2::Catch2)
# One architecture: nvcc compiles every kernel once per architecture, and the GPUs the tests run on
# are Hopper parts (tools/cuda_ops.cu, built for the CLI, still compiles them for sm_80 too).
set_target_properties(accel_test_cuda PROPERTIES
  CUDA_ARCHITECTURES "90"
  CUDA_RUNTIME_LIBRARY Shared   # the libcudart of CUDA::cudart, never a second, static copy
  LINKER_LANGUAGE CXX)
# CMake 3.25 knows no CUDA20 dialect flag for nvcc, so the standard is passed by hand. The host
# side of the .cu must compile the shared inline functions as the g++ objects do (OpenMP, ISA).
target_compile_options(accel_test_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 -Xcompiler=-fopenmp>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${ACCEL_MARCH}>>:-Xcompiler=-march=${ACCEL_MARCH}>)
if(ACCEL_SANITIZE)
  target_link_options(accel_test_cuda PRIVATE -fsanitize=address,undefined)
endif()
add_test(NAME cuda COMMAND accel_test_cuda)
# The CUDA runtime maps memory where ASan's shadow gap would be.
set_tests_properties(cuda PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;ASAN_OPTIONS=protect_shadow_gap=0")
