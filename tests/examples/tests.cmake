# Every example runs as a test: each exits non-zero when what it prints would be wrong
# (big_model_inference compares every loaded tensor with the checkpoint and the cpu share with its budget).
foreach(example big_model_inference load_checkpoint quickstart)
  if(TARGET ${example})
    add_test(NAME example_${example} COMMAND ${example})
  endif()
endforeach()
