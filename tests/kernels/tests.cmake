kite_unit_test(test_kernels ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c)
