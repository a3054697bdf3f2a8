# The dist tests under mpirun with 2 and 3 processes (CTest label "mpi": ctest -L mpi), beside the
# glob's one-process entry "dist". --oversubscribe lets 3 processes share a 2-core machine. A test
# that would hang ends at its timeout; the state's own 120 s collective timeout (dist_fixture.hpp)
# usually turns a stuck collective into a failure first.
# The dist layer's static_assert messages, checked as tests/compile_fail checks the others'.
file(GLOB accel_dist_compile_fail ${CMAKE_CURRENT_LIST_DIR}/compile_fail/*.cpp)
foreach(src IN LISTS accel_dist_compile_fail)
  get_filename_component(name ${src} NAME_WE)
  file(STRINGS ${src} expect REGEX "^// expect: ")
  string(REPLACE "// expect: " "" expect "${expect}")
  add_test(NAME compile_fail_dist_${name}
           COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -I${PROJECT_SOURCE_DIR}/include -I/usr/include ${src})
  set_tests_properties(compile_fail_dist_${name} PROPERTIES PASS_REGULAR_EXPRESSION "${expect}")
endforeach()

if(NOT TARGET accel_test_dist OR NOT ACCEL_MPI_ENABLED)
  return()
endif()
find_program(ACCEL_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})
if(NOT ACCEL_MPIEXEC)
  message(STATUS "accel: no mpirun found; the dist tests run in one process only")
  return()
endif()

set(accel_dist_env "OMP_NUM_THREADS=1")
if(ACCEL_SANITIZE)
  # Open MPI keeps allocations until exit that LeakSanitizer reports; the file names only its
  # libraries. Its components are unloaded at MPI_Finalize and built without frame pointers, so
  # only the slow unwinder reaches a frame in a library the file can name.
  list(APPEND accel_dist_env
       "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan_openmpi.supp:print_suppressions=0:fast_unwind_on_malloc=0")
endif()
foreach(np 2 3)
  add_test(NAME dist_mpi_np${np}
           COMMAND ${ACCEL_MPIEXEC} --oversubscribe --allow-run-as-root -np ${np} $<TARGET_FILE:accel_test_dist>
                   "[mpi]")
  set_tests_properties(dist_mpi_np${np} PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${accel_dist_env}")
endforeach()
# Five processes take MPI_Iallgather where fewer exchange point to point (dist/mpi.hpp): the
# gathers run once that way too.
add_test(NAME dist_mpi_np5_gather
         COMMAND ${ACCEL_MPIEXEC} --oversubscribe --allow-run-as-root -np 5 $<TARGET_FILE:accel_test_dist>
                 "gather*,all_gather_into_tensor*,reduce and gather*")
set_tests_properties(dist_mpi_np5_gather PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${accel_dist_env}")
# A peer that never arrives: process 0's collective must end with a DistributedError after the
# state's 2 s timeout. The broken group then ends the job through MPI_Abort, so the test passes on
# the line process 0 prints, not on the exit status.
add_test(NAME dist_mpi_timeout
         COMMAND ${ACCEL_MPIEXEC} --oversubscribe --allow-run-as-root -np 2 $<TARGET_FILE:accel_test_dist>
                 "[.dist_timeout]")
set_tests_properties(dist_mpi_timeout PROPERTIES LABELS mpi TIMEOUT 60 ENVIRONMENT "${accel_dist_env}"
                     PASS_REGULAR_EXPRESSION "dist timeout test: process 0 reported the timeout")
# Two processes gathering different sizes outside debug mode: each must report it (the broken group
# ends the job through MPI_Abort, so the test passes on the line process 0 prints and fails on a
# failed check of either).
add_test(NAME dist_mpi_gather_mismatch
         COMMAND ${ACCEL_MPIEXEC} --oversubscribe --allow-run-as-root -np 2 $<TARGET_FILE:accel_test_dist>
                 "[.dist_gather_mismatch]")
set_tests_properties(dist_mpi_gather_mismatch PROPERTIES LABELS mpi TIMEOUT 60 ENVIRONMENT "${accel_dist_env}"
                     PASS_REGULAR_EXPRESSION "process 0 reported the mismatch"
                     FAIL_REGULAR_EXPRESSION "FAILED")
set_tests_properties(dist PROPERTIES LABELS "mpi")
