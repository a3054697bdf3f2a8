# The CUDA language for the project's own programs, and accel_cuda_ops: one nvcc translation unit
# (tools/cuda_ops.cu) with every kernel and op, compiled once and linked into each program that
# runs models on a GPU (the CLI, the GPU benchmarks). Included from the top directory, the
# highest one common to every target that compiles CUDA. Sets ACCEL_CUDA_LANGUAGE.
include_guard(GLOBAL)
set(ACCEL_CUDA_LANGUAGE OFF)
if(NOT ACCEL_CUDA_ENABLED)
  return()
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "accel: no CUDA compiler found; programs are built without GPU kernels")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
enable_language(CUDA)
set(ACCEL_CUDA_LANGUAGE ON)

add_library(accel_cuda_ops OBJECT ${PROJECT_SOURCE_DIR}/tools/cuda_ops.cu)
target_link_libraries(accel_cuda_ops PRIVATE accel::accel)
set_target_properties(accel_cuda_ops PROPERTIES CUDA_ARCHITECTURES "80;90" CUDA_RUNTIME_LIBRARY Shared)
# CMake 3.25 knows no CUDA20 dialect flag for nvcc, so the standard is passed by hand; the host
# side must compile the shared inline functions as the g++ objects do (OpenMP, ISA).
target_compile_options(accel_cuda_ops PRIVATE -std=c++20 -Xcompiler=-fopenmp
                       $<$<BOOL:${ACCEL_MARCH}>:-Xcompiler=-march=${ACCEL_MARCH}>)

# Links the kernels into `target` (a g++ program) with the shared CUDA runtime.
function(accel_link_cuda_ops target)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:accel_cuda_ops>)
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX CUDA_RUNTIME_LIBRARY Shared)
endfunction()
