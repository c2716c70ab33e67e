# The routed MoE FFN against a double reference of its math, and its batch invariance.
kite_unit_test(test_moe ${CMAKE_CURRENT_LIST_DIR}/test_moe.c)
