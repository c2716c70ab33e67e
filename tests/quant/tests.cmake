# Tensor types: layouts from the format definition, bit-exactness with ggml, error bounds, ref dot, fp16/bf16.
kite_unit_test(test_quant ${CMAKE_CURRENT_LIST_DIR}/test_quant.c)
# kite quantize against llama.cpp's own quantizer (libllama / libggml-base of the npm oracle, dlopen'ed;
# the test fails when tests/oracle/node_modules is missing) and its llamacpp_probs.mjs runner.
# kite_write_random_model writes Hugging Face folders and their GGUF for the conversion test.
kite_unit_test(test_quantize ${CMAKE_CURRENT_LIST_DIR}/test_quantize.c ${CMAKE_CURRENT_LIST_DIR}/llama_lib.c)
target_link_libraries(test_quantize PRIVATE ${CMAKE_DL_LIBS} PkgConfig::JANSSON)
set_tests_properties(test_quantize PROPERTIES ENVIRONMENT
  "${KITE_TEST_ENV};KITE_NODE=${KITE_NODE_EXECUTABLE};KITE_LLAMA_LIB_DIR=${PROJECT_SOURCE_DIR}/tests/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
# bench/quantize_vs_llamacpp.c: kite_quantize vs llama_model_quantize timings (not a test).
add_executable(quantize_vs_llamacpp ${PROJECT_SOURCE_DIR}/bench/quantize_vs_llamacpp.c ${CMAKE_CURRENT_LIST_DIR}/llama_lib.c)
target_link_libraries(quantize_vs_llamacpp PRIVATE kite_internal ${CMAKE_DL_LIBS})
target_include_directories(quantize_vs_llamacpp PRIVATE ${CMAKE_CURRENT_LIST_DIR})
kite_script_test(test_cli_quantize quant/test_cli_quantize.py)

# bench/trellis_rd.c: rate-distortion of the trellis types next to llama.cpp's (not a test).
add_executable(trellis_rd ${PROJECT_SOURCE_DIR}/bench/trellis_rd.c ${CMAKE_CURRENT_LIST_DIR}/llama_lib.c)
target_link_libraries(trellis_rd PRIVATE kite_internal ${CMAKE_DL_LIBS} m)
target_include_directories(trellis_rd PRIVATE ${CMAKE_CURRENT_LIST_DIR})
