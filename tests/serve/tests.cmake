# kite serve as a real process on loopback, driven by the openai npm client (tests/oracle/node_modules),
# curl and raw HTTP: see test_serve.mjs. Needs node (>= 20) and `npm ci` in tests/oracle.
find_program(KITE_NODE_EXECUTABLE node)
if(NOT KITE_NODE_EXECUTABLE)
  message(WARNING "node not found: test_serve will fail until Node.js >= 20 is installed")
  set(KITE_NODE_EXECUTABLE node)
endif()
add_test(NAME test_serve COMMAND ${KITE_NODE_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/serve/test_serve.mjs
         WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(test_serve PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 300)

# Structured output and tool calls (response_format, grammar, tools / tool_choice) on the same footing.
add_test(NAME test_serve_structured COMMAND ${KITE_NODE_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/serve/test_serve_structured.mjs
         WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(test_serve_structured PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 600)
