"""Shared helpers of the kite run CLI tests: the models, running kite, a pass/fail tally."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tally import Tally  # noqa: E402,F401  (re-exported: the tests import it from here)

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
MODELS = os.path.join(DATA, "models")
TOK512 = os.path.join(MODELS, "tinystories-tok512")
# stories260K as a llama2.c checkpoint (trained context 512) with its tokenizer.
S260 = ["--model", os.path.join(TOK512, "stories260K.bin"), "--tokenizer", os.path.join(TOK512, "tok512.bin")]
TINY_DIR = os.path.join(MODELS, "tinystories-656k")
TINY = ["--model", os.path.join(TINY_DIR, "tinystories-656k-q8_0.gguf")]


def kite(args, input=None, timeout=60, stdout=subprocess.PIPE):
    """Runs kite; returns (returncode, stdout bytes, stderr str)."""
    p = subprocess.run([KITE] + list(args), input=input, stdout=stdout, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", errors="replace")


def run_json(args, input=None, timeout=60):
    """kite run ... --json -q; returns (returncode, the parsed object or None, stderr)."""
    rc, out, err = kite(["run"] + list(args) + ["--json", "--quiet"], input=input, timeout=timeout)
    try:
        obj = json.loads(out)
    except ValueError:
        obj = None
    return rc, obj, err
