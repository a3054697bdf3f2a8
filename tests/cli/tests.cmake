# The `accel` CLI on checkpoints: `accel inspect` (table and --json, each row checked against
# hashes that tests/cli/check_inspect.py computes itself) and `accel estimate-memory` / `accel
# plan` on models built from checkpoint headers. The safetensors inputs are written at test time
# by make_cli_checkpoints.py; the torch .bin inputs are the checked-in torch.save fixtures.
if(TARGET accel_cli)
  find_program(ACCEL_PYTHON3 python3 REQUIRED)
  set(cli_dir ${PROJECT_SOURCE_DIR}/tests/cli)
  set(cli_ck ${CMAKE_CURRENT_BINARY_DIR}/cli_checkpoints)
  set(torch_bin ${PROJECT_SOURCE_DIR}/tests/data/torch_bin)
  set(check ${ACCEL_PYTHON3} ${cli_dir}/check_inspect.py $<TARGET_FILE:accel_cli>)

  add_test(NAME cli_checkpoints_setup COMMAND ${ACCEL_PYTHON3} ${cli_dir}/make_cli_checkpoints.py ${cli_ck})
  set_tests_properties(cli_checkpoints_setup PROPERTIES FIXTURES_SETUP cli_checkpoints)

  add_test(NAME cli_inspect_safetensors_table COMMAND ${check} ${cli_ck}/tiny.safetensors)
  add_test(NAME cli_inspect_safetensors_json COMMAND ${check} ${cli_ck}/tiny.safetensors --json)
  add_test(NAME cli_inspect_index_json COMMAND ${check} ${cli_ck}/sharded/model.safetensors.index.json --json)
  add_test(NAME cli_inspect_index_folder_table COMMAND ${check} ${cli_ck}/sharded)
  set_tests_properties(cli_inspect_safetensors_table cli_inspect_safetensors_json cli_inspect_index_json
                       cli_inspect_index_folder_table PROPERTIES FIXTURES_REQUIRED cli_checkpoints)

  add_test(NAME cli_inspect_torch_bin_json COMMAND ${check} ${torch_bin}/state_dict.bin --json)
  add_test(NAME cli_inspect_torch_bin_table COMMAND ${check} ${torch_bin}/module.bin)
  add_test(NAME cli_inspect_torch_bin_refuses_globals
           COMMAND ${check} ${torch_bin}/malicious_os_system.bin --expect-error "refusing to load global posix.system")
  if(EXISTS ${PROJECT_SOURCE_DIR}/tests/data/offload_fixture/index.json)
    add_test(NAME cli_inspect_offload_json COMMAND ${check} ${PROJECT_SOURCE_DIR}/tests/data/offload_fixture --json)
  endif()
  # Hostile checkpoints and offload folders (made by the checker): typed errors within a second,
  # never a byte read outside the folder.
  add_test(NAME cli_inspect_hostile COMMAND ${check} --hostile ${CMAKE_CURRENT_BINARY_DIR}/cli_hostile)
  # GGUF: accel inspect against the conformance manifest (header, typed metadata, tensor rows,
  # --dequantize byte for byte, malformed files refused).
  if(EXISTS ${ACCEL_SHARED_DIR}/conformance/gguf/manifest.json)
    add_test(NAME cli_inspect_gguf COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_inspect_gguf.py $<TARGET_FILE:accel_cli>
                                           ${ACCEL_SHARED_DIR}/conformance/gguf)
  endif()
  add_test(NAME cli_inspect_usage COMMAND accel_cli inspect)
  set_tests_properties(cli_inspect_usage PROPERTIES WILL_FAIL TRUE)

  # The command lines themselves (check_cli_usage.py): --help, --version, and the exit codes
  # 0 success, 1 bad input (missing files, out-of-range sizes), 2 usage errors.
  set(usage_check ${ACCEL_PYTHON3} ${cli_dir}/check_cli_usage.py)
  set(usage_model ${PROJECT_SOURCE_DIR}/tests/data/configs/gpt2_tiny/config.json)
  foreach(group help usage bad-input output)
    # "-": these groups do not run accel-conformance.
    add_test(NAME cli_usage_${group}
             COMMAND ${usage_check} ${group} $<TARGET_FILE:accel_cli> - ${PROJECT_VERSION} ${usage_model})
  endforeach()
  if(TARGET accel-conformance)
    add_test(NAME cli_usage_conformance COMMAND ${usage_check} conformance $<TARGET_FILE:accel_cli>
                                                $<TARGET_FILE:accel-conformance> ${PROJECT_VERSION} ${usage_model})
  endif()

  # Floats sized as float32: 3 layers of 16 + 24 weights (160 bytes each) are the largest layers,
  # the whole model holds 820.5 bytes (the 4 bools count 1/8 byte each, as in Accelerate).
  add_test(NAME cli_estimate_memory_safetensors COMMAND accel_cli estimate-memory ${cli_ck}/tiny.safetensors)
  set_tests_properties(cli_estimate_memory_safetensors PROPERTIES
                       PASS_REGULAR_EXPRESSION "float32 +\\| 160 bytes +\\| 820.5 bytes .*Largest layer: model.layers.0 \\(and 2 more")
  add_test(NAME cli_estimate_memory_index
           COMMAND accel_cli estimate-memory ${cli_ck}/sharded/model.safetensors.index.json --dtypes bfloat16)
  set_tests_properties(cli_estimate_memory_index PROPERTIES
                       PASS_REGULAR_EXPRESSION "bfloat16 +\\| 80 bytes +\\| 442.5 bytes")
  # 300 bytes on GPU 0 take lm_head and the model's own small tensors; the 3 layers (112 bytes
  # each as stored: no float32 upcast when planning) go to the CPU.
  add_test(NAME cli_plan_safetensors_json
           COMMAND accel_cli plan ${cli_ck}/tiny.safetensors --max-memory 0=300,cpu=1GB --json)
  set_tests_properties(cli_estimate_memory_safetensors cli_estimate_memory_index cli_plan_safetensors_json
                       PROPERTIES FIXTURES_REQUIRED cli_checkpoints)
  set_tests_properties(cli_plan_safetensors_json PROPERTIES PASS_REGULAR_EXPRESSION "\"lm_head\": 0.*\"model.layers\": \"cpu\"")

  # estimate-memory and plan numbers on real-shaped configs (GPT-2 124M, Llama-2-7b, TinyLlama-1.1B
  # with grouped-query attention) against check_estimate_plan.py's own arithmetic: exact bytes of
  # every dtype row and the Adam column, the table's cells, device maps under --reserve,
  # --kv-cache, --balanced and --balanced-low-0.
  set(estimate_check ${ACCEL_PYTHON3} ${cli_dir}/check_estimate_plan.py $<TARGET_FILE:accel_cli>)
  set(cfg ${PROJECT_SOURCE_DIR}/tests/data/configs)
  foreach(model gpt2 llama2_7b tinyllama_1.1b)
    add_test(NAME cli_estimate_memory_numbers_${model} COMMAND ${estimate_check} estimate ${cfg}/${model})
    add_test(NAME cli_estimate_memory_numbers_${model}_with_head
             COMMAND ${estimate_check} estimate ${cfg}/${model} --with-head)
  endforeach()
  foreach(model llama2_7b tinyllama_1.1b)
    add_test(NAME cli_plan_numbers_${model} COMMAND ${estimate_check} plan-config ${cfg}/${model})
  endforeach()
  # Models at the edge of what a size counts (2^60 bytes): past it, exit 1 with an error that names
  # the tensor or module, never wrapped negative sizes; below it, a largest layer within the total.
  add_test(NAME cli_huge_sizes COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_huge_sizes.py $<TARGET_FILE:accel_cli>
                                       ${CMAKE_CURRENT_BINARY_DIR}/cli_huge_sizes)
  # The same CLI on conformance model specs, against what Accelerate itself answered.
  set(queries ${ACCEL_SHARED_DIR}/conformance/accelerate/queries)
  if(EXISTS ${queries}/llama_tiny.json AND EXISTS ${queries}/gpt2_tiny.json)
    foreach(spec gpt2_tiny llama_tiny mixed_dtypes toy_model_for_test toy_nested)
      add_test(NAME cli_estimate_memory_spec_${spec} COMMAND ${estimate_check} spec-estimate ${queries}/${spec}.json)
    endforeach()
    set(llama_cases two_gpus_nosplit two_gpus_split four_gpus_nosplit gpu_cpu_disk_nosplit tiny fp16 balanced_4_infer
                    balanced_4_low_zero_infer)
    set(gpt2_cases two_gpus_nosplit three_gpus_split gpu_cpu_disk fp16_nosplit balanced_3_low_zero_infer)
    add_test(NAME cli_plan_spec_llama_tiny COMMAND ${estimate_check} spec-plan ${queries}/llama_tiny.json ${llama_cases})
    add_test(NAME cli_plan_spec_gpt2_tiny COMMAND ${estimate_check} spec-plan ${queries}/gpt2_tiny.json ${gpt2_cases})
    add_test(NAME cli_plan_spec_llama_tiny_reserve
             COMMAND ${estimate_check} spec-plan ${queries}/llama_tiny.json ${llama_cases} --with-reserve)
    add_test(NAME cli_plan_spec_gpt2_tiny_reserve
             COMMAND ${estimate_check} spec-plan ${queries}/gpt2_tiny.json ${gpt2_cases} --with-reserve)
  else()
    message(STATUS "accel: no CLI tests on conformance specs: ${queries} has no llama_tiny.json / gpt2_tiny.json "
                   "(set ACCEL_SHARED_DIR to the shared/ folder)")
  endif()
  # `accel run` on the reference model folders (check_run.py): greedy tokens against the
  # independent references, dtypes and seeded sampling, --prompt through a tokenizer.json, the
  # errors of incomplete or inconsistent folders, placement under a CPU budget, and the same weights
  # as safetensors shards and as a pytorch_model.bin written without torch (formats).
  foreach(group reference dtypes prompt errors placement formats)
    add_test(NAME cli_run_${group}
             COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_run.py ${group} $<TARGET_FILE:accel_cli>
                     ${PROJECT_SOURCE_DIR}/tests/data/models ${CMAKE_CURRENT_BINARY_DIR}/cli_run_${group})
  endforeach()
  # `accel run` on GGUF files the checker converts itself from the reference folders (llama.cpp's
  # names, q/k row order and transposes): transformers' greedy tokens (check_run_gguf.py).
  add_test(NAME cli_run_gguf
           COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_run_gguf.py $<TARGET_FILE:accel_cli>
                   ${PROJECT_SOURCE_DIR}/tests/data/models ${CMAKE_CURRENT_BINARY_DIR}/cli_run_gguf)
  # `accel run` without a model (check_default_model.py), in a temporary XDG_CACHE_HOME: a 2-layer
  # model of the default's vocabulary (its files, its tokenizer against the checker's own BPE, the
  # cache reused, damaged folders written again, the demo's CPU + disk plan, token check, text,
  # --json, --quiet and --progress), and the 310 MB default model itself (config, sizes, check).
  # Under the sanitizers (-O0) the real model took 374 s, the longest test of that suite by far; the
  # tiny one runs the same code.
  set(default_model_groups tiny real)
  if(ACCEL_SANITIZE)
    set(default_model_groups tiny)
  endif()
  foreach(group IN LISTS default_model_groups)
    add_test(NAME cli_default_model_${group}
             COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_default_model.py ${group} $<TARGET_FILE:accel_cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_default_model_${group})
  endforeach()
  # accel quantize (bitsandbytes nf4 / fp4 / int8, transformers' layout) and accel run --quantize:
  # the saved folder runs as the model quantized on load; GGUF and TorchAO schemes on load, the 8-bit
  # ones with the float tokens (check_quantize.py).
  add_test(NAME cli_quantize
           COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_quantize.py $<TARGET_FILE:accel_cli>
                   ${PROJECT_SOURCE_DIR}/tests/data/models ${CMAKE_CURRENT_BINARY_DIR}/cli_quantize)
  # accel quantize IN OUT.gguf: each architecture's F32 / F16 / BF16 file runs with the folder's tokens,
  # a folder's tokenizer travels into a Q8_0 file, usage and input errors (check_quantize_gguf.py).
  add_test(NAME cli_quantize_gguf
           COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_quantize_gguf.py $<TARGET_FILE:accel_cli>
                   ${PROJECT_SOURCE_DIR}/tests/data/models ${CMAKE_CURRENT_BINARY_DIR}/cli_quantize_gguf)
  # mpirun -np 2 and 3 accel run: the model split across processes, each within its budget, the
  # single-process tokens (check_split_run.py). Labelled mpi with the dist tests.
  find_program(ACCEL_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})
  if(ACCEL_MPI_ENABLED AND ACCEL_MPIEXEC)
    add_test(NAME cli_run_split
             COMMAND ${ACCEL_PYTHON3} ${cli_dir}/check_split_run.py ${ACCEL_MPIEXEC} $<TARGET_FILE:accel_cli>
                     ${PROJECT_SOURCE_DIR}/tests/data/models ${CMAKE_CURRENT_BINARY_DIR}/cli_run_split)
    set(split_env "OMP_NUM_THREADS=1")
    if(ACCEL_SANITIZE)
      # Open MPI's own allocations, as for the dist tests (tests/dist/tests.cmake).
      list(APPEND split_env
           "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/dist/lsan_openmpi.supp:print_suppressions=0:fast_unwind_on_malloc=0")
    endif()
    set_tests_properties(cli_run_split PROPERTIES LABELS mpi TIMEOUT 900 ENVIRONMENT "${split_env}")
  endif()
else()
  message(STATUS "accel: no CLI tests on checkpoints and configs: the accel_cli target is not built (tools/ is missing)")
endif()
