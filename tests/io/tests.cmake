# io loaders: safetensors, HF config, HF folders, llama2.c checkpoints.
kite_unit_test(test_safetensors ${CMAKE_CURRENT_LIST_DIR}/test_safetensors.c)
kite_unit_test(test_hf_config ${CMAKE_CURRENT_LIST_DIR}/test_hf_config.c)
kite_unit_test(test_source_hf ${CMAKE_CURRENT_LIST_DIR}/test_source_hf.c)
kite_unit_test(test_llama2c ${CMAKE_CURRENT_LIST_DIR}/test_llama2c.c)
# Gemma 4 / Muse Glimmer GGUF files: the unsupported features refused by name.
kite_unit_test(test_source_gguf_gemma4 ${CMAKE_CURRENT_LIST_DIR}/test_source_gguf_gemma4.c)
foreach(t test_safetensors test_hf_config test_source_hf test_llama2c)
  target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
endforeach()
