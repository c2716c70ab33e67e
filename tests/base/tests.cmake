kite_unit_test(test_threadpool ${CMAKE_CURRENT_LIST_DIR}/test_threadpool.c)
