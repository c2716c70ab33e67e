# The everyday command line (kite run, tokenize, detokenize, help, bench), run as real processes: a full
# context and SIGINT are normal stops with --json, write errors (/dev/full, a closed pipe) fail the
# command, stop strings, no control-token text, the prompt from a file or stdin, logit bias and
# log-probabilities, llama.cpp's short flags, usage errors exit 2, and a mismatched tokenizer refused.
kite_script_test(test_cli_run_stops cli_run/test_run_stops.py)
kite_script_test(test_cli_run_io cli_run/test_run_io.py)
kite_script_test(test_cli_run_flags cli_run/test_run_flags.py)
kite_script_test(test_cli_run_prompt_cache cli_run/test_run_prompt_cache.py)
