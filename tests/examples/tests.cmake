# Every example runs as a test: each exits non-zero when what it prints would be wrong
# (big_model_inference compares every loaded tensor with the checkpoint and the cpu share with its budget;
# the offload and dispatch examples compare logits and tokens with the plain model's, bit for bit).
foreach(example big_model_inference load_checkpoint quickstart dispatch_big_model cpu_offload disk_offload
                cpu_offload_with_hook send_to_device find_executable_batch_size)
  if(TARGET ${example})
    add_test(NAME example_${example} COMMAND ${example})
  endif()
endforeach()
