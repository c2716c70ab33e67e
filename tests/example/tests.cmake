# The README's C example: compiled against the shared library and run on stories260K; a second test
# checks that README.md quotes examples/simple.c verbatim, so the README cannot drift.
add_executable(example_simple ${PROJECT_SOURCE_DIR}/examples/simple.c)
target_link_libraries(example_simple PRIVATE kite_shared)
target_include_directories(example_simple PRIVATE ${PROJECT_SOURCE_DIR}/include)
add_test(NAME example_simple COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/test_example.py $<TARGET_FILE:example_simple>)
set_tests_properties(example_simple PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 300)
