# The GBNF compilers (src/grammar/json_schema.c, regex.c) against independent references: ajv 8 with
# ajv-formats validates the grammars' random sentences and the fixtures (ajv_check.mjs), node's RegExp
# decides the regex cases (regex_check.mjs). Both need `npm ci` in tests/oracle (ajv, ajv-formats,
# json-schema-test-suite); without node or node_modules the tests fail and say so.
find_program(KITE_NODE_EXECUTABLE node)
kite_unit_test(test_schema ${CMAKE_CURRENT_LIST_DIR}/test_schema.c)
target_link_libraries(test_schema PRIVATE PkgConfig::JANSSON)
set_tests_properties(test_schema PROPERTIES ENVIRONMENT "${KITE_TEST_ENV};KITE_NODE=${KITE_NODE_EXECUTABLE}")
kite_unit_test(test_regex ${CMAKE_CURRENT_LIST_DIR}/test_regex.c)
target_link_libraries(test_regex PRIVATE PkgConfig::JANSSON)
set_tests_properties(test_regex PROPERTIES ENVIRONMENT "${KITE_TEST_ENV};KITE_NODE=${KITE_NODE_EXECUTABLE}")
