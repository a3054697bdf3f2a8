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
  add_test(NAME cli_inspect_usage COMMAND accel_cli inspect)
  set_tests_properties(cli_inspect_usage PROPERTIES WILL_FAIL TRUE)

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
endif()
