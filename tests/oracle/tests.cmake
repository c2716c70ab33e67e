# The independent-implementation check: random-weight Llama-3 / Qwen2 / Qwen3 models (real tokenizers)
# written as GGUF and as HF folders; kite's next-token probabilities against llama.cpp's through the npm
# package node-llama-cpp (pinned in tests/oracle/package.json; CI runs `npm ci` in tests/oracle first).
# Without node or node_modules the test fails and says what is missing.
find_program(KITE_NODE_EXECUTABLE node)
if(NOT KITE_NODE_EXECUTABLE)
  message(WARNING "node not found: test_oracle will fail until Node.js >= 20 is installed")
endif()

add_executable(make_random_model ${CMAKE_CURRENT_LIST_DIR}/make_random_model.c ${CMAKE_CURRENT_LIST_DIR}/random_model.c)
target_link_libraries(make_random_model PRIVATE kite_internal PkgConfig::JANSSON)

kite_unit_test(test_oracle ${CMAKE_CURRENT_LIST_DIR}/test_oracle.c ${CMAKE_CURRENT_LIST_DIR}/random_model.c)
target_link_libraries(test_oracle PRIVATE PkgConfig::JANSSON)
# Four families through node-llama-cpp take about 4 minutes on an idle machine; a loaded one needs more.
set_tests_properties(test_oracle PROPERTIES ENVIRONMENT "${KITE_TEST_ENV};KITE_NODE=${KITE_NODE_EXECUTABLE}" TIMEOUT 1200)
