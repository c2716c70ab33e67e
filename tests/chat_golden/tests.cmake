# Chat templates against goldens rendered by the npm package @huggingface/jinja (made by
# tests/chat_golden/make_goldens.mjs): kite's renders byte for byte, and its token ids against the real Qwen3 and Llama-3
# tokenizers, with the forging case.
kite_unit_test(test_chat_golden ${CMAKE_CURRENT_LIST_DIR}/test_chat_golden.c)
target_link_libraries(test_chat_golden PRIVATE PkgConfig::JANSSON)

# The goldens cannot drift from the reference: a fresh render by make_goldens.mjs (about 3 s) must equal
# the committed goldens.json. Needs node and tests/oracle/node_modules (npm ci there); fails saying so.
find_program(KITE_NODE_EXECUTABLE node)
if(NOT KITE_NODE_EXECUTABLE)
  message(WARNING "node not found: test_chat_goldens_current will fail until Node.js >= 20 is installed")
  set(KITE_NODE_EXECUTABLE node)
endif()
add_test(NAME test_chat_goldens_current
         COMMAND ${KITE_NODE_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/make_goldens.mjs --check
         WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(test_chat_goldens_current PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 120)
