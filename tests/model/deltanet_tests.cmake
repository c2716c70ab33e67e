# The gated delta rule: chunk-parallel and step-wise forms against a double-precision reference.
kite_unit_test(test_deltanet ${CMAKE_CURRENT_LIST_DIR}/test_deltanet.c)
