# The measuring side: the random-model writer and the machine probe (cmocka), and the bench /
# gen-model commands of the CLI (a python3 script driving the kite binary).
kite_unit_test(test_random_model ${CMAKE_CURRENT_LIST_DIR}/test_random_model.c)
kite_script_test(bench_cli bench/test_bench_cli.py)
# The writer's Hugging Face folder (kite_random_model_params.hf_dir): kite's logits for it equal the GGUF's.
kite_unit_test(test_random_model_hf ${CMAKE_CURRENT_LIST_DIR}/test_random_model_hf.c)
