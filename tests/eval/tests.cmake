# Measuring quality: kite_perplexity against llama.cpp's own probabilities (node-llama-cpp, as
# tests/oracle), kite_kld against a direct double-precision computation from both models' logits,
# kite_imatrix_compute against a reference forward pass, its files read by an independent parser
# (imatrix_parse.py), and bad input; `kite perplexity|kld|imatrix` as processes.
kite_unit_test(test_quality ${CMAKE_CURRENT_LIST_DIR}/test_quality.c)
target_link_libraries(test_quality PRIVATE PkgConfig::JANSSON)
set_tests_properties(test_quality PROPERTIES ENVIRONMENT "${KITE_TEST_ENV};KITE_NODE=${KITE_NODE_EXECUTABLE}")
kite_script_test(test_cli_quality eval/test_quality_cli.py)
