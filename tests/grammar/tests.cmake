# Grammars: the GBNF parser and byte-level matcher, against jansson (JSON validity), utf8proc (UTF-8)
# and PCRE2 (random regular grammars), plus malformed grammars and the matcher's limits.
kite_unit_test(test_gbnf ${CMAKE_CURRENT_LIST_DIR}/test_gbnf.c)
target_link_libraries(test_gbnf PRIVATE PkgConfig::JANSSON PkgConfig::PCRE2 PkgConfig::UTF8PROC)
# Lazy grammars (free text until a trigger) against their definition, PCRE2 deciding the grammar part.
kite_unit_test(test_lazy ${CMAKE_CURRENT_LIST_DIR}/test_lazy.c)
target_link_libraries(test_lazy PRIVATE PkgConfig::PCRE2)
