# GPU benchmarks: each benchmarks/gpu/bench_*.cpp is a g++ program linked with the kernels
# (accel_cuda_ops, cmake/AccelCudaOps.cmake). Built whenever the CUDA backend is on; each says so
# and exits when no GPU is visible.
if(NOT ACCEL_CUDA_LANGUAGE)
  return()
endif()
file(GLOB gpu_bench_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/bench_*.cpp)
foreach(src IN LISTS gpu_bench_sources)
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${accel_bench_all} ${src})
  target_link_libraries(${name} PRIVATE accel::accel accel_dev_flags)
  target_compile_options(${name} PRIVATE -O3)
  target_compile_definitions(${name} PRIVATE ACCEL_BENCHMARKS_DIR="${PROJECT_SOURCE_DIR}/benchmarks")
  accel_link_cuda_ops(${name})
endforeach()
