kite_unit_test(test_session ${CMAKE_CURRENT_LIST_DIR}/test_session.c)
kite_unit_test(test_batch ${CMAKE_CURRENT_LIST_DIR}/test_batch.c)
