#!/usr/bin/env python3
"""kite perplexity, kite kld and kite imatrix as processes: results on stdout (llama.cpp's lines and --json),
progress on stderr, files the independent parser reads, and bad input (missing text, a text shorter than two
chunks, models with different vocabularies, an output that cannot be created, bad option values): one
'kite: error:' line and a non-zero status, no file left behind."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
SRC = os.environ.get("KITE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
M = os.path.join(DATA, "models")
STORIES = os.path.join(M, "tinystories-tok512", "stories260K.gguf")
TS656 = os.path.join(M, "tinystories-656k", "tinystories-656k-q8_0.gguf")
TEXT = os.path.join(DATA, "data", "mt_bench", "question.jsonl")
PARSER = os.path.join(SRC, "tests", "eval", "imatrix_parse.py")

failures = []


def run(args, timeout=60):
    return subprocess.run([KITE] + args, capture_output=True, timeout=timeout, text=True)


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failures.append(name)


def expect_error(name, args, needle, status=None):
    p = run(args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    good = (p.returncode != 0 and p.returncode < 128 and (status is None or p.returncode == status) and len(lines) == 1
            and lines[0].startswith("kite: error: ") and needle.lower() in lines[0].lower())
    check(name, good, f"status {p.returncode}, stderr {p.stderr!r}")
    return p


def main():
    tmp = tempfile.mkdtemp(prefix="kite-quality-cli-")
    common = ["-f", TEXT, "-c", "64", "--chunks", "2", "--threads", "2"]

    # perplexity: the text line and --json agree; progress on stderr per chunk.
    p = run(["perplexity", "-m", STORIES] + common)
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", p.stdout)
    check("perplexity prints llama.cpp's final line", p.returncode == 0 and m is not None, p.stdout + p.stderr)
    check("perplexity progress per chunk on stderr", "[1]" in p.stderr and "[2]" in p.stderr and "[1]" not in p.stdout,
          p.stderr)
    pj = run(["perplexity", "-m", STORIES, "--json", "-q"] + common)
    j = json.loads(pj.stdout)
    check("perplexity --json", pj.returncode == 0 and j["n_chunks"] == 2 and j["n_scored"] == 2 * 31 and pj.stderr == "",
          pj.stdout + pj.stderr)
    check("perplexity text and json agree", m is not None and abs(float(m.group(1)) - j["ppl"]) < 1e-3 * j["ppl"])

    # kld of a model against itself: zero, every top token the same; the llama.cpp blocks are printed.
    k = run(["kld", "-m", STORIES, "--reference", STORIES] + common)
    check("kld prints llama.cpp's statistics",
          k.returncode == 0 and "====== KL divergence statistics ======" in k.stdout and "Same top p: 100.000" in k.stdout
          and "Median  KLD:   0.000000" in k.stdout, k.stdout + k.stderr)
    check("kld progress table on stderr", "KL Divergence" in k.stderr and "Same top p" in k.stderr, k.stderr)
    kj = json.loads(run(["kld", "-m", STORIES, "--reference", STORIES, "--json", "-q"] + common).stdout)
    check("kld --json of a model with itself", kj["kld"] == 0 and kj["same_top"] == 1 and kj["kld_quantiles"]["0.99"] == 0,
          json.dumps(kj))

    # imatrix: both formats, read back by the independent parser.
    for fmt in ("gguf", "dat"):
        out = os.path.join(tmp, "im." + fmt)
        r = run(["imatrix", "-m", STORIES, "-o", out, "--output-format", fmt, "--json", "-q"] + common)
        ok = r.returncode == 0 and json.loads(r.stdout)["n_entries"] == 35 and os.path.exists(out)
        parsed = os.path.join(tmp, "im." + fmt + ".json")
        ok = ok and subprocess.run([sys.executable, PARSER, out, parsed]).returncode == 0
        d = json.load(open(parsed)) if ok else {}
        check(f"imatrix --output-format {fmt} parses", ok and len(d["entries"]) == 35 and d["chunk_count"] == 2,
              r.stdout + r.stderr)
        check(f"imatrix {fmt}: no temporary file left", sorted(os.listdir(tmp)) == sorted(
            f for f in os.listdir(tmp) if ".tmp." not in f))

    # node-llama-cpp's GGUF reader (llama.cpp's metadata layout, independently implemented) reads it too.
    node = shutil.which("node")
    info = subprocess.run([node or "node", os.path.join(SRC, "tests", "oracle", "gguf_info.mjs"), os.path.join(tmp, "im.gguf")],
                          capture_output=True, text=True, timeout=60) if node else None
    ok = info is not None and info.returncode == 0
    g = json.loads(info.stdout) if ok else {}
    check("node-llama-cpp reads the imatrix GGUF",
          ok and g["version"] == 3 and g["metadata"]["general"]["type"] == "imatrix"
          and g["metadata"]["imatrix"]["chunk_count"] == 2 and g["metadata"]["imatrix"]["chunk_size"] == 64
          and g["metadata"]["imatrix"]["datasets"] == [TEXT] and len(g["tensors"]) == 70
          and all(t["type"] == 0 for t in g["tensors"])
          and {"name": "blk.0.ffn_down.weight.in_sum2", "dims": [172, 1]}.items()
          <= next(t for t in g["tensors"] if t["name"] == "blk.0.ffn_down.weight.in_sum2").items(),
          "node not found" if not node else (info.stdout[:300] + info.stderr))

    # Bad input.
    expect_error("no --text", ["perplexity", "-m", STORIES], "needs --text", status=2)
    expect_error("no --reference", ["kld", "-m", STORIES, "-f", TEXT], "needs --reference", status=2)
    expect_error("missing text file", ["perplexity", "-m", STORIES, "-f", os.path.join(tmp, "nope.txt")], "nope.txt")
    short = os.path.join(tmp, "short.txt")
    open(short, "w").write("Once upon a time there was a little girl.")
    expect_error("text shorter than two chunks", ["perplexity", "-m", STORIES, "-f", short], "too short")
    expect_error("imatrix text shorter than two chunks", ["imatrix", "-m", STORIES, "-f", short, "-o",
                                                          os.path.join(tmp, "x.gguf")], "too short")
    check("no file after a failed imatrix", not os.path.exists(os.path.join(tmp, "x.gguf")))
    expect_error("vocabulary mismatch", ["kld", "-m", STORIES, "--reference", TS656] + common, "vocabulary")
    bad_out = os.path.join(tmp, "no-such-dir", "im.gguf")
    expect_error("unwritable output", ["imatrix", "-m", STORIES, "-o", bad_out] + common, "cannot create")
    expect_error("output is a device", ["imatrix", "-m", STORIES, "-o", "/dev/null"] + common, "not a regular file")
    check("/dev/null is still a device", os.path.exists("/dev/null") and not os.path.isfile("/dev/null"))
    expect_error("bad --output-format", ["imatrix", "-m", STORIES, "--output-format", "bin"] + common, "gguf or dat",
                 status=2)
    expect_error("bad --ctx", ["perplexity", "-m", STORIES, "-f", TEXT, "-c", "4"], "--ctx", status=2)
    expect_error("bad --cache-type", ["perplexity", "-m", STORIES, "--cache-type", "q4"] + common, "f16 or f32", status=2)
    for verb in ("perplexity", "kld", "imatrix"):
        h = run(["help", verb])
        check(f"kite help {verb}", h.returncode == 0 and h.stdout.startswith(f"usage: kite {verb}"), h.stdout)
    check("kite help lists the verbs", all(v in run(["help"]).stdout for v in ("perplexity", "kld", "imatrix")))

    subprocess.run(["rm", "-rf", tmp])
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
