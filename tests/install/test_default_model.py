#!/usr/bin/env python3
"""kite run without --model: the lookup order of the default model (models/README.md) and its output."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from reference import PROMPT, check_story  # noqa: E402

KITE = os.environ["KITE_BIN"]
SRC = os.environ["KITE_SOURCE_DIR"]
DATA = os.environ.get("KITE_TEST_DATA", "../shared")
INSTALLED = os.environ["KITE_INSTALLED_DEFAULT_MODEL"]
SOURCE_COPY = os.path.join(SRC, "models", "tinystories-656k-q8_0.gguf")
passed = 0


def run(args, env_default=None):
    env = dict(os.environ)
    env.pop("KITE_DEFAULT_MODEL", None)
    if env_default is not None:
        env["KITE_DEFAULT_MODEL"] = env_default
    return subprocess.run([KITE] + args, capture_output=True, timeout=60, env=env)


GREEDY = ["run", "--prompt", PROMPT, "--temperature", "0", "--max-tokens", "32"]

# Nothing set: the installed copy if the configured prefix has one, else this source tree's.
r = run(GREEDY)
assert r.returncode == 0, r.stderr
expected = INSTALLED if os.path.isfile(INSTALLED) else SOURCE_COPY
assert f"using the default model {expected}\n".encode() in r.stderr, r.stderr
check_story(r.stdout, "kite run without --model")
passed += 1

# The committed copy is the file the test data describes (byte for byte).
with open(SOURCE_COPY, "rb") as a, open(os.path.join(DATA, "models", "tinystories-656k", "tinystories-656k-q8_0.gguf"), "rb") as b:
    assert a.read() == b.read()
passed += 1

# KITE_DEFAULT_MODEL comes first.
other = os.path.join(DATA, "models", "tinystories-tok512", "stories260K.gguf")
r = run(GREEDY, env_default=other)
assert r.returncode == 0, r.stderr
assert f"using the default model {other}\n".encode() in r.stderr, r.stderr
assert b"Lily" in r.stdout, r.stdout  # llama2.c's documented greedy sample for stories260K names Lily
passed += 1

# A KITE_DEFAULT_MODEL that names no file is an error (not a silent fall-back), and says to pass --model.
r = run(GREEDY, env_default="/nonexistent/model.gguf")
assert r.returncode == 2, (r.returncode, r.stderr)
line = r.stderr.decode()
assert line.count("\n") == 1 and "--model" in line and "/nonexistent/model.gguf" in line, line
passed += 1

# --quiet keeps stderr free of the note; --model wins over the variable.
r = run(GREEDY + ["--quiet", "--model", SOURCE_COPY], env_default="/nonexistent/model.gguf")
assert r.returncode == 0 and r.stderr == b"", r.stderr
check_story(r.stdout, "kite run --model")
passed += 1

# kite chat with the default model: it has no chat template, so the usual clear error.
r = subprocess.run([KITE, "chat"], input=b"hello\n", capture_output=True, timeout=60,
                   env={k: v for k, v in os.environ.items() if k != "KITE_DEFAULT_MODEL"})
assert r.returncode == 1, (r.returncode, r.stderr)
assert b"using the default model" in r.stderr and b"--chat-template" in r.stderr, r.stderr
passed += 1
print(f"{passed} passed, 0 failed")
