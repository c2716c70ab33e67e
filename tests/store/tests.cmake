# The model store and kite pull against a fake Hugging Face hub on loopback (fake_hub.mjs: the hub's API
# shape, Range, fault injection), with repositories built from $KITE_TEST_DATA/models.
add_test(NAME test_store_pull COMMAND ${KITE_NODE_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_pull.mjs WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(test_store_pull PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 120)
kite_unit_test(test_store_unit ${CMAKE_CURRENT_LIST_DIR}/test_store_unit.c)
target_link_libraries(test_store_unit PRIVATE PkgConfig::JANSSON)
