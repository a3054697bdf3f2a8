# The planner's loops count their iterations against their stated bounds in the tests too, not
# only in debug builds (plan/loop_bound.hpp); every test file of accel_test_plan sees the same
# definition, so the inline planner functions stay one definition.
target_compile_definitions(accel_test_plan PRIVATE ACCEL_CHECK_LOOP_BOUNDS)

# Planner tests beyond accel_test_plan:
# - one ctest per Accelerate conformance query file: accel-conformance answers it and
#   shared/conformance/compare.py judges the answers (the test fails unless every case passes);
# - the `accel` CLI on small GPT-2 / LLaMA config.json files (tests/data/configs).
if(TARGET accel-conformance)
  find_program(ACCEL_PYTHON3 python3 REQUIRED)
  set(conf_dir ${ACCEL_SHARED_DIR}/conformance)
  file(GLOB accel_conformance_queries ${conf_dir}/accelerate/queries/*.json)
  foreach(query IN LISTS accel_conformance_queries)
    get_filename_component(name ${query} NAME_WE)
    get_filename_component(query_dir ${query} DIRECTORY)
    file(READ ${query} query_text)
    string(JSON spec_rel GET ${query_text} spec)
    get_filename_component(spec ${query_dir}/${spec_rel} ABSOLUTE)
    set(answers ${CMAKE_CURRENT_BINARY_DIR}/conformance_answers/${name}.json)
    add_test(NAME conformance_accelerate_${name}
             COMMAND bash -c "mkdir -p \"$(dirname '${answers}')\" && '$<TARGET_FILE:accel-conformance>' '${query}' > '${answers}' && '${ACCEL_PYTHON3}' '${conf_dir}/compare.py' '${conf_dir}/accelerate/expected/${name}.json' '${answers}' '${spec}'")
    set_tests_properties(conformance_accelerate_${name} PROPERTIES
                         PASS_REGULAR_EXPRESSION " 0 failed" FAIL_REGULAR_EXPRESSION "FAIL ")
  endforeach()
  if(NOT accel_conformance_queries)
    message(STATUS "accel: no Accelerate conformance tests: no query files in ${conf_dir}/accelerate/queries "
                   "(set ACCEL_SHARED_DIR to the shared/ folder)")
  endif()
else()
  message(STATUS "accel: no Accelerate conformance tests: the accel-conformance target is not built "
                 "(tools/ is missing)")
endif()

if(TARGET accel_cli)
  set(cfg ${PROJECT_SOURCE_DIR}/tests/data/configs)
  add_test(NAME cli_estimate_memory_gpt2
           COMMAND accel_cli estimate-memory ${cfg}/gpt2_tiny/config.json)
  set_tests_properties(cli_estimate_memory_gpt2 PROPERTIES
                       PASS_REGULAR_EXPRESSION "float32.*\\|.*float16.*\\|.*int4")
  # A config is sized as its base model (LlamaModel: no "model." prefix, no lm_head) unless
  # --with-head asks for the causal LM.
  add_test(NAME cli_estimate_memory_llama
           COMMAND accel_cli estimate-memory ${cfg}/llama_tiny/config.json)
  set_tests_properties(cli_estimate_memory_llama PROPERTIES
                       PASS_REGULAR_EXPRESSION "\\(LlamaModel\\).*Largest layer: layers.0 \\(and 3 more")
  add_test(NAME cli_estimate_memory_llama_with_head
           COMMAND accel_cli estimate-memory ${cfg}/llama_tiny/config.json --with-head)
  set_tests_properties(cli_estimate_memory_llama_with_head PROPERTIES
                       PASS_REGULAR_EXPRESSION "\\(LlamaForCausalLM\\).*Largest layer: model.layers.0")
  add_test(NAME cli_plan_llama_json
           COMMAND accel_cli plan ${cfg}/llama_tiny/config.json --max-memory 0=1MB,1=1MB,cpu=1GB
                   --no-split LlamaDecoderLayer --json)
  set_tests_properties(cli_plan_llama_json PROPERTIES
                       PASS_REGULAR_EXPRESSION "\"model.embed_tokens\": 0")
  add_test(NAME cli_plan_gpt2_table
           COMMAND accel_cli plan ${cfg}/gpt2_tiny/config.json --max-memory 0=150KB,cpu=1GB --dtype float16
                   --no-split GPT2Block)
  set_tests_properties(cli_plan_gpt2_table PROPERTIES PASS_REGULAR_EXPRESSION "transformer.wte +\\| 0")
  add_test(NAME cli_plan_bad_memory COMMAND accel_cli plan ${cfg}/gpt2_tiny/config.json --max-memory gpu=1GB)
  set_tests_properties(cli_plan_bad_memory PROPERTIES WILL_FAIL TRUE)
  add_test(NAME cli_plan_bad_kv_cache
           COMMAND accel_cli plan ${cfg}/gpt2_tiny/config.json --max-memory 0=1GB --kv-cache 12y4)
  add_test(NAME cli_plan_kv_cache_needs_config
           COMMAND accel_cli plan ${PROJECT_SOURCE_DIR}/tests/data/torch_bin/state_dict.bin
                   --max-memory 0=1GB --kv-cache 128)
  set_tests_properties(cli_plan_bad_kv_cache PROPERTIES PASS_REGULAR_EXPRESSION "is not SEQ\\[xBATCH\\]")
  set_tests_properties(cli_plan_kv_cache_needs_config PROPERTIES PASS_REGULAR_EXPRESSION "--kv-cache needs a transformers config.json")
else()
  message(STATUS "accel: no CLI tests on config.json files: the accel_cli target is not built (tools/ is missing)")
endif()
