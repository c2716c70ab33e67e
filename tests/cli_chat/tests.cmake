# The chat-template verbs of the CLI, run as real processes: kite template against @huggingface/jinja
# (node, live), special tokens in raw text (kite tokenize, kite run --no-special), kite run --chat, and
# kite chat piped (multi-turn cache reuse, /stats, /save, /load, /reset, reasoning), on a pty (Ctrl-C),
# and with bad input.
kite_script_test(test_cli_template cli_chat/test_template.py)
kite_script_test(test_cli_run_chat cli_chat/test_run_chat.py)
kite_script_test(test_cli_chat_session cli_chat/test_chat_session.py)
kite_script_test(test_cli_chat_interrupt cli_chat/test_chat_interrupt.py)
kite_script_test(test_cli_chat_errors cli_chat/test_chat_errors.py)
kite_script_test(test_cli_chat_tools cli_chat/test_chat_tools.py)
