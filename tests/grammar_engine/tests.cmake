# Grammar-constrained decoding in the engine: token masks against brute force, generated text checked
# by jansson and PCRE2, how constrained generation ends. (Exactness under speculation: tests/spec;
# batching: tests/engine.)
kite_unit_test(test_grammar_engine ${CMAKE_CURRENT_LIST_DIR}/test_grammar_engine.c)
target_link_libraries(test_grammar_engine PRIVATE PkgConfig::JANSSON PkgConfig::PCRE2)
kite_script_test(test_grammar_cli grammar_engine/test_grammar_cli.py)
