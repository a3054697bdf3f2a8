# Every public header compiles on its own: one generated translation unit per header, each
# including only that header, built as part of the tests (a header that leans on an include it
# does not make fails here). The .cuh kernels are nvcc's (tests/cuda_kernels builds them), and the
# CUDA runtime headers need the toolkit, so they join only when the CUDA backend is on.
# The sanitizer build skips them: parsing a header finds nothing at run time, and the suite
# under ASan / UBSan is rebuilt in CI where every minute counts.
if(ACCEL_SANITIZE)
  return()
endif()
file(GLOB_RECURSE accel_public_headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/include/accel/*.hpp)
set(accel_header_sources)
foreach(header IN LISTS accel_public_headers)
  if(header MATCHES "/cuda/" AND NOT ACCEL_CUDA_ENABLED)
    continue()
  endif()
  string(REGEX REPLACE "[/.]" "_" stem "${header}")
  set(tu ${CMAKE_CURRENT_BINARY_DIR}/header_checks/${stem}.cpp)
  file(CONFIGURE OUTPUT ${tu} CONTENT "#include \"${header}\"\n")
  list(APPEND accel_header_sources ${tu})
endforeach()
add_library(accel_header_checks OBJECT ${accel_header_sources})
target_link_libraries(accel_header_checks PRIVATE accel::accel accel_dev_flags)
# Parsing is the check: no code generation or optimisation is needed.
target_compile_options(accel_header_checks PRIVATE -O0 -g0)
