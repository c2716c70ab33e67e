# Speculative decoding: output identical to plain decoding for every drafter and budget (public API),
# the verification walk and the rejection verifier (internal), and the CLI.
kite_unit_test(test_spec_exact ${CMAKE_CURRENT_LIST_DIR}/test_spec_exact.c)
kite_unit_test(test_spec_internal ${CMAKE_CURRENT_LIST_DIR}/test_spec_internal.c)
kite_script_test(test_spec_cli spec/test_spec_cli.py)
# Gemma 3's sliding-window and global layers: speculation exact on a tiny-gemma3 random model.
kite_unit_test(test_spec_gemma3 ${CMAKE_CURRENT_LIST_DIR}/test_spec_gemma3.c)
