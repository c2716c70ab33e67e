# GGUF reader and writer: the real TinyStories files, writer round trips, malformed inputs.
kite_unit_test(test_gguf ${CMAKE_CURRENT_LIST_DIR}/test_gguf.c)
target_link_libraries(test_gguf PRIVATE PkgConfig::JANSSON)
