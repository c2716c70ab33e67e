# Grammar-constrained decoding in the engine: token masks against brute force, generated text checked
# by jansson and PCRE2, how constrained generation ends. (Exactness under speculation: tests/spec;
# batching: tests/engine.)
kite_unit_test(test_grammar_engine ${CMAKE_CURRENT_LIST_DIR}/test_grammar_engine.c)
target_link_libraries(test_grammar_engine PRIVATE PkgConfig::JANSSON PkgConfig::PCRE2)
kite_script_test(test_grammar_cli grammar_engine/test_grammar_cli.py)
# bench/grammar_vs_llamacpp.c: per-token mask cost against llama.cpp's grammar sampler (not a test).
add_executable(grammar_vs_llamacpp ${PROJECT_SOURCE_DIR}/bench/grammar_vs_llamacpp.c)
target_link_libraries(grammar_vs_llamacpp PRIVATE kite_internal ${CMAKE_DL_LIBS} m)
