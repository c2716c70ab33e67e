# kite serve --router with real processes on loopback: a kite serve as the cloud, the fault-injecting
# proxy (fault_server.mjs) in front of it, the openai-compatible answers checked per rule and per fault.
add_test(NAME test_router COMMAND ${KITE_NODE_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/route/test_router.mjs
         WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(test_router PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 300)
