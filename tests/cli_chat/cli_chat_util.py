"""Shared helpers of the chat CLI tests: running kite, the @huggingface/jinja reference renderer
(node, live), tokenizer configs, and a pass/fail tally."""
import json
import os
import subprocess
import tempfile
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tally import Tally  # noqa: E402,F401  (re-exported: the tests import it from here)

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
SRC = os.environ["KITE_SOURCE_DIR"]
KITE = os.environ["KITE_BIN"]
HERE = os.path.join(SRC, "tests", "cli_chat")
MODELS = os.path.join(DATA, "models")
TINY = os.path.join(MODELS, "tinystories-656k")  # a real HF model (no chat template of its own)
TINY_TEMPLATE = os.path.join(HERE, "tiny-chatml.jinja")
THINK_TEMPLATE = os.path.join(HERE, "tiny-think.jinja")
TOKENIZERS = os.path.join(MODELS, "tokenizers")


def kite(args, input=None, timeout=300):
    """Runs kite; returns (returncode, stdout bytes, stderr str)."""
    p = subprocess.run([KITE] + list(args), input=input, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", errors="replace")


def jinja_render(template, variables):
    """The reference: @huggingface/jinja renders template with variables (a dict)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({"template": template, "variables": variables}, f, ensure_ascii=False)
        job = f.name
    try:
        p = subprocess.run(["node", os.path.join(HERE, "jinja_render.mjs"), job], capture_output=True, timeout=120,
                           env=dict(os.environ, KITE_SOURCE_DIR=SRC))
    finally:
        os.unlink(job)
    if p.returncode != 0:
        raise RuntimeError("node @huggingface/jinja failed: " + p.stderr.decode(errors="replace"))
    return p.stdout.decode("utf-8")


def hf_encode(tokenizer_dir, texts):
    """The reference ids of texts (special-token text included, no BOS) by @lenml/tokenizers."""
    p = subprocess.run(["node", os.path.join(HERE, "hf_encode.mjs"), tokenizer_dir] + list(texts), capture_output=True,
                       timeout=300, env=dict(os.environ, KITE_SOURCE_DIR=SRC))
    if p.returncode != 0:
        raise RuntimeError("node @lenml/tokenizers failed: " + p.stderr.decode(errors="replace"))
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def special_tokens(config_path):
    """The special-token variables HF's apply_chat_template passes (bos_token, eos_token, ...), from a
    tokenizer_config.json: the ones that are set."""
    cfg = json.load(open(config_path, encoding="utf-8"))
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def tokenize(model_args, text, special=True):
    """Token ids of text by kite tokenize (no BOS: a rendered template writes its own)."""
    args = ["tokenize"] + list(model_args) + ["--no-bos", "--keep-newline"] + ([] if special else ["--no-special"])
    rc, out, err = kite(args, input=text.encode("utf-8"))
    if rc != 0:
        raise RuntimeError("kite tokenize failed: " + err)
    return [int(x) for x in out.split()]


def common_prefix(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n
