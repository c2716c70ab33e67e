# Composing grammars (src/grammar/compose.c) and the forced tool-call grammar (src/chat/tool_grammar.c).
kite_unit_test(test_compose ${CMAKE_CURRENT_LIST_DIR}/test_compose.c)
