# Golden outputs of the real models (../shared/models/reference_greedy.json).
kite_unit_test(test_golden ${CMAKE_CURRENT_LIST_DIR}/test_golden.c)
target_link_libraries(test_golden PRIVATE PkgConfig::JANSSON)
kite_script_test(test_cli_golden model/test_cli_golden.py)
kite_script_test(test_cli_errors model/test_cli_errors.py)
kite_script_test(test_cli_families model/test_cli_families.py)
