# Chat templates: the Jinja interpreter against @huggingface/jinja's renders (jinja_cases.json), error
# lines, limits, origin masks, the public API and masked tokenization with the real Qwen3 tokenizer.
kite_unit_test(test_jinja ${CMAKE_CURRENT_LIST_DIR}/test_jinja.c)
target_link_libraries(test_jinja PRIVATE PkgConfig::JANSSON)
# The committed cases file is what the npm package renders today (node re-renders and compares).
find_program(KITE_NODE node)
if(KITE_NODE)
  add_test(NAME test_jinja_cases_current COMMAND ${KITE_NODE} ${CMAKE_CURRENT_LIST_DIR}/jinja_cases.mjs --check)
  set_tests_properties(test_jinja_cases_current PROPERTIES ENVIRONMENT "TZ=UTC")
endif()
# Tool-call parsing: the real templates' tool-call turns (tool_call_cases.json, rendered by
# @huggingface/jinja) parsed back to their calls, streamed at every split point.
kite_unit_test(test_tool_calls ${CMAKE_CURRENT_LIST_DIR}/test_tool_calls.c)
target_link_libraries(test_tool_calls PRIVATE PkgConfig::JANSSON)
if(KITE_NODE)
  add_test(NAME test_tool_call_cases_current COMMAND ${KITE_NODE} ${CMAKE_CURRENT_LIST_DIR}/tool_call_cases.mjs --check)
endif()
