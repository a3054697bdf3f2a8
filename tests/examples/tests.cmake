# Every example runs as a test: each exits non-zero when what it prints would be wrong
# (big_model_inference compares every loaded tensor with the checkpoint and the cpu share with its budget;
# the offload and dispatch examples compare logits and tokens with the plain model's, bit for bit).
foreach(example big_model_inference load_checkpoint quickstart dispatch_big_model cpu_offload disk_offload
                cpu_offload_with_hook send_to_device find_executable_batch_size quantize_on_load)
  if(TARGET ${example})
    add_test(NAME example_${example} COMMAND ${example})
  endif()
endforeach()

# The distributed examples alone (a world of one) and under mpirun with 2 processes.
find_program(ACCEL_EXAMPLE_MPIEXEC NAMES mpirun mpiexec)
set(example_mpi_env "OMP_NUM_THREADS=1")
if(ACCEL_SANITIZE)
  # Open MPI's own allocations kept until exit (tests/dist/tests.cmake says why this unwinder).
  list(APPEND example_mpi_env
       "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/dist/lsan_openmpi.supp:print_suppressions=0:fast_unwind_on_malloc=0")
endif()
foreach(example distributed_evaluation split_model)
  if(TARGET ${example})
    add_test(NAME example_${example} COMMAND ${example})
    if(ACCEL_MPI_ENABLED AND ACCEL_EXAMPLE_MPIEXEC)
      add_test(NAME example_${example}_np2
               COMMAND ${ACCEL_EXAMPLE_MPIEXEC} --oversubscribe --allow-run-as-root -np 2 $<TARGET_FILE:${example}>)
      set_tests_properties(example_${example}_np2 PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${example_mpi_env}")
    endif()
  endif()
endforeach()
# Both write to the same temporary folder.
if(TARGET split_model AND TEST example_split_model_np2)
  set_tests_properties(example_split_model example_split_model_np2 PROPERTIES RESOURCE_LOCK split_model_folder)
endif()
