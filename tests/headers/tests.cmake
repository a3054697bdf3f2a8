# Every public header compiles on its own: one generated translation unit per header, each
# including only that header (a header that leans on an include it does not make fails here). The
# .cuh kernels are nvcc's (tests/cuda_kernels builds them), and the CUDA runtime headers need the
# toolkit, so they join only when the CUDA backend is on.
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
# Not built: the front end is the check, and check_compiles.py runs it from compile_commands.json,
# once per unit whose preprocessed text changed since tests/headers/compile_checks.sha256 recorded
# it (the benchmarks, defined by benchmarks/CMakeLists.txt, are checked the same way), for x86-64-v3
# on every machine, so that the preprocessed text and its key do not depend on the CPU.
add_library(accel_header_checks OBJECT EXCLUDE_FROM_ALL ${accel_header_sources})
target_link_libraries(accel_header_checks PRIVATE accel::accel accel_dev_flags)
target_compile_options(accel_header_checks PRIVATE -O0 -g0)
find_program(ACCEL_PYTHON3 python3 REQUIRED)
add_test(NAME compile_checks
         COMMAND ${ACCEL_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/check_compiles.py
                 --commands ${PROJECT_BINARY_DIR}/compile_commands.json
                 --source-dir ${PROJECT_SOURCE_DIR} --build-dir ${PROJECT_BINARY_DIR}
                 --manifest ${CMAKE_CURRENT_LIST_DIR}/compile_checks.sha256
                 --write ${PROJECT_BINARY_DIR}/compile_checks.sha256
                 header_checks/ <source>/benchmarks/)
set_tests_properties(compile_checks PROPERTIES TIMEOUT 3000)
