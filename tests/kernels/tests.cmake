kite_unit_test(test_kernels ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c)
# The build compiled the AMX tiles in (CMakeLists.txt): on a CPU and OS that grant them they must be used.
if(KITE_COMPILER_HAS_AMX)
  target_compile_definitions(test_kernels PRIVATE KITE_TEST_BUILD_HAS_AMX=1)
endif()
kite_unit_test(test_trellis ${CMAKE_CURRENT_LIST_DIR}/test_trellis.c)
