kite_unit_test(test_session ${CMAKE_CURRENT_LIST_DIR}/test_session.c)
