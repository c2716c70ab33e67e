kite_unit_test(test_kernels ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c)
kite_unit_test(test_trellis ${CMAKE_CURRENT_LIST_DIR}/test_trellis.c)
kite_unit_test(test_deltanet_kernels ${CMAKE_CURRENT_LIST_DIR}/test_deltanet_kernels.c)
