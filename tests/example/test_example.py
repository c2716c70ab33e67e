#!/usr/bin/env python3
"""Runs the README's C example and checks it against `kite run` and the README text."""
import os
import subprocess
import sys

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
SRC = os.environ["KITE_SOURCE_DIR"]
KITE = os.environ["KITE_BIN"]
model = os.path.join(DATA, "models", "tinystories-tok512", "stories260K.gguf")

example = subprocess.run([sys.argv[1], model, "Once upon a time"], capture_output=True, timeout=120)
assert example.returncode == 0, example.stderr
cli = subprocess.run([KITE, "run", "--model", model, "--prompt", "Once upon a time", "--temperature", "0",
                      "--max-tokens", "32", "--quiet"], capture_output=True, timeout=120)
assert cli.returncode == 0, cli.stderr
print("example:", example.stdout.decode())
assert example.stdout == cli.stdout, (example.stdout, cli.stdout)
assert b"Lily" in example.stdout  # llama2.c's documented greedy sample for stories260K names Lily

readme = open(os.path.join(SRC, "README.md")).read()
code = open(os.path.join(SRC, "examples", "simple.c")).read()
assert code in readme, "README.md must quote examples/simple.c verbatim"
print("2 passed, 0 failed")
