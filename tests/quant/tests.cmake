# Tensor types: layouts from the format definition, bit-exactness with ggml, error bounds, ref dot, fp16/bf16.
kite_unit_test(test_quant ${CMAKE_CURRENT_LIST_DIR}/test_quant.c)
