# The independent-implementation check: random-weight models of every family (real tokenizers)
# written as GGUF and as HF folders; kite's next-token probabilities against llama.cpp's through the npm
# package node-llama-cpp (pinned in tests/oracle/package.json; CI runs `npm ci` in tests/oracle first).
# Without node or node_modules the test fails and says what is missing.
find_program(KITE_NODE_EXECUTABLE node)
if(NOT KITE_NODE_EXECUTABLE)
  message(WARNING "node not found: test_oracle will fail until Node.js >= 20 is installed")
endif()

# The models are written by the library's writer (kite_write_random_model_ex, the one behind `kite gen-model`).
add_executable(test_oracle ${CMAKE_CURRENT_LIST_DIR}/test_oracle.c)
target_link_libraries(test_oracle PRIVATE kite_internal PkgConfig::CMOCKA PkgConfig::JANSSON)
target_include_directories(test_oracle PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
# One ctest per family or group of families sharing a tokenizer (read once per process), so a parallel
# ctest runs them side by side.
function(kite_oracle_test name)
  add_test(NAME ${name} COMMAND test_oracle ${ARGN} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${KITE_TEST_ENV};KITE_NODE=${KITE_NODE_EXECUTABLE}" TIMEOUT 1200)
endfunction()
kite_oracle_test(test_oracle_llama llama)
kite_oracle_test(test_oracle_qwen qwen2 qwen3)
kite_oracle_test(test_oracle_gemma3 gemma3)
kite_oracle_test(test_oracle_qwen3moe qwen3moe)
kite_oracle_test(test_oracle_qwen35 qwen35)
kite_oracle_test(test_oracle_lfm2 lfm2)
kite_oracle_test(test_oracle_muse_glimmer muse-glimmer)
kite_oracle_test(test_oracle_gemma4 gemma4)
