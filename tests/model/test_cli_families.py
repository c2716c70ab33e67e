#!/usr/bin/env python3
"""Every model family through the command line, as a user meets it: `kite gen-model` writes each family's
test shape (GGUF, llama.cpp's names), `kite inspect` names the architecture and shows what sets the family
apart (conv layers, experts, Gated DeltaNet layers, sliding windows, the MTP block), `kite run --json`
decodes it greedily, and `kite run --draft ngram` (and `--draft mtp` where the file has a head) gives the
same ids, so the speculative path of the CLI is exact on every family. A file of an architecture kite does
not run is refused in one line that names it and lists the families kite runs. Whether the families compute
the right thing is test_oracle's job (against llama.cpp); this is the CLI around them."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

KITE = os.environ["KITE_BIN"]

# shape, architecture inspect must print, a line inspect must show for the family (None: no extra line)
FAMILIES = [
    ("tiny", "llama", None),
    ("tiny-llama3", "llama", None),
    ("tiny-qwen2", "qwen2", None),
    ("tiny-qwen3", "qwen3", None),
    ("tiny-qwen3moe", "qwen3moe", "experts:        8 (2 per token"),
    ("tiny-qwen35", "qwen35", "gated deltanet: 3 of the layers"),
    ("tiny-qwen35-mtp", "qwen35", "next-n (MTP):   1 block"),
    ("tiny-lfm2", "lfm2", "conv layers:    3 of 4"),
    ("tiny-gemma3", "gemma3", "sliding window: 8 positions"),
    ("tiny-gemma4", "gemma4", "sliding window: 8 positions"),
    ("tiny-muse-glimmer", "muse-glimmer", "sliding window: 8 positions"),
]
PROMPT_IDS = "1,17,200,33,5,81,300,12,7,45,99,150"
GEN = 24

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        results["passed"] += 1
        print(f"ok   {name}")
    else:
        results["failed"] += 1
        print(f"FAIL {name}: {detail}")


def kite(*args, timeout=120):
    return subprocess.run([KITE, *args], capture_output=True, timeout=timeout)


def run_ids(model, *extra):
    p = kite("run", "--model", model, "--prompt-ids", PROMPT_IDS, "--max-tokens", str(GEN), "--temperature", "0",
             "--ignore-eos", "--json", *extra)
    if p.returncode != 0:
        return None, p.stderr.decode(errors="replace").strip()
    return json.loads(p.stdout), ""


def main():
    tmp = tempfile.mkdtemp(prefix="kite-families-")
    try:
        for shape, arch, feature in FAMILIES:
            path = os.path.join(tmp, shape + ".gguf")
            p = kite("gen-model", "--shape", shape, "--type", "f32", "--seed", "3", "--out", path)
            check(f"{shape}: gen-model", p.returncode == 0 and os.path.getsize(path) > 0, p.stderr.decode(errors="replace"))
            if p.returncode != 0:
                continue
            p = kite("inspect", path)
            out = p.stdout.decode()
            check(f"{shape}: inspect names {arch}", p.returncode == 0 and f"architecture:   {arch}\n" in out,
                  out[:400] + p.stderr.decode(errors="replace"))
            if feature:
                check(f"{shape}: inspect shows '{feature}'", feature in out, out[:800])
            if shape != "tiny-qwen35-mtp":
                check(f"{shape}: inspect shows no MTP block", "next-n (MTP)" not in out, out[:800])
            plain, err = run_ids(path)
            check(f"{shape}: run", plain is not None and len(plain["ids"]) == GEN and plain["stopped"] == "length", err)
            if plain is None:
                continue
            drafters = ["ngram"] + (["mtp"] if shape == "tiny-qwen35-mtp" else [])
            for drafter in drafters:
                spec, err = run_ids(path, "--draft", drafter)
                check(f"{shape}: run --draft {drafter} gives the same ids", spec is not None and spec["ids"] == plain["ids"],
                      err or f"{spec['ids'] if spec else None} vs {plain['ids']}")
            if shape == "tiny-qwen35":  # no head: --draft mtp refused by name, nothing printed on stdout
                p = kite("run", "--model", path, "--prompt-ids", PROMPT_IDS, "--max-tokens", "4", "--draft", "mtp")
                err = p.stderr.decode(errors="replace")
                check("tiny-qwen35: --draft mtp refused without a head", p.returncode != 0 and "MTP" in err and p.stdout == b"",
                      f"exit {p.returncode}: {err}")

        # An architecture kite does not run: the Qwen3 file with every "qwen3" of its metadata made "xwen3"
        # (same length, so the file stays well-formed: general.architecture and the xwen3.* keys; its
        # tokenizer is the SentencePiece-style "llama" one, untouched).
        with open(os.path.join(tmp, "tiny-qwen3.gguf"), "rb") as f:
            data = f.read()
        header_end = data.find(b"token_embd.weight")  # patch the metadata only, never tensor data
        assert header_end > 0 and data[:header_end].count(b"qwen3") > 2
        patched = data[:header_end].replace(b"qwen3", b"xwen3") + data[header_end:]
        bad = os.path.join(tmp, "xwen3.gguf")
        with open(bad, "wb") as f:
            f.write(patched)
        for verb in (["run", "--model", bad, "--prompt-ids", "1,2", "--max-tokens", "2"], ["inspect", bad]):
            p = kite(*verb)
            lines = [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]
            ok = (0 < p.returncode < 128 and len(lines) == 1 and lines[0].startswith("kite: error: ") and "'xwen3'" in lines[0]
                  and "qwen35" in lines[0] and "lfm2" in lines[0] and p.stdout == b"")
            check(f"unsupported architecture refused by {verb[0]}", ok, f"exit {p.returncode}: {lines}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
