#!/usr/bin/env python3
"""`kite run --draft ...` prints the same ids as plain `kite run` for both real draft/target pairs,
greedy and sampled with a seed, and reports the speculative statistics in --json; incompatible or
unloadable drafts and out-of-range settings fail with a one-line error. `kite bench --spec` runs on
two small prompt sets with every drafter, reports every category, reproduces plain decoding and
writes an SVG plot; its bad input fails with a one-line error."""
import json
import os
import shutil
import subprocess
import sys

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
M = os.path.join(DATA, "models")
TOK512 = os.path.join(M, "tinystories-tok512", "tok512.bin")

PAIRS = [
    ("llama2xs-281K <- stories260K",
     ["--model", os.path.join(M, "tinystories-tok512", "llama2xs-281K.bin"), "--tokenizer", TOK512],
     os.path.join(M, "tinystories-tok512", "stories260K.bin")),
    ("TinyStories-656K F32 <- Q8_0",
     ["--model", os.path.join(M, "tinystories-656k")],
     os.path.join(M, "tinystories-656k", "tinystories-656k-q8_0.gguf")),
    # --tokenizer serves the llama2.c target; the GGUF draft keeps the tokenizer it carries.
    ("llama2xs-281K <- stories260K GGUF",
     ["--model", os.path.join(M, "tinystories-tok512", "llama2xs-281K.bin"), "--tokenizer", TOK512],
     os.path.join(M, "tinystories-tok512", "stories260K.gguf")),
]
SPEC_KEYS = ("tau", "drafted", "accepted", "target_passes", "acceptance_by_depth", "draft_ms", "verify_ms")

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        print("FAIL:", msg)
        failures += 1
    return cond


def run(args, expect_rc=0):
    p = subprocess.run([KITE, "run", "--threads", "1", "--quiet"] + args, capture_output=True, timeout=300)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def run_json(args):
    rc, out, err = run(args + ["--json"])
    if not check(rc == 0, f"kite run {' '.join(args)} exited {rc}: {err.strip()}"):
        return None
    return json.loads(out)


def eagle3_cli():
    """`--draft HEAD.gguf` with an EAGLE-3 head written by `kite gen-model --shape eagle3 --target`: the
    same ids as plain decoding (greedy chain, seeded tree) with drafts made; a head for another target
    fails with one error line naming the width mismatch."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        paths = {n: os.path.join(d, n + ".gguf") for n in ("tiny", "head", "other", "other-head")}
        for args in (["--shape", "tiny", "--type", "f32", "--out", paths["tiny"]],
                     ["--shape", "eagle3", "--target", paths["tiny"], "--out", paths["head"]],
                     ["--shape", "tiny-gemma3", "--type", "f32", "--out", paths["other"]],
                     ["--shape", "eagle3", "--target", paths["other"], "--out", paths["other-head"]]):
            p = subprocess.run([KITE, "gen-model"] + args, capture_output=True, timeout=120)
            if not check(p.returncode == 0, f"gen-model {' '.join(args)}: {p.stderr.decode(errors='replace')}"):
                return
        base = ["--model", paths["tiny"], "--prompt", "one two three one two", "--max-tokens", "24", "--ignore-eos"]
        for sampling, spec in ((["--temperature", "0"], ["--spec-budget", "4"]),
                               (["--temperature", "1", "--seed", "3"], ["--spec-budget", "8", "--spec-tree", "3"])):
            plain = run_json(base + sampling)
            got = run_json(base + sampling + ["--draft", paths["head"]] + spec)
            if plain is None or got is None:
                continue
            label = f"eagle3 head {' '.join(sampling + spec)}"
            ok = check(got["ids"] == plain["ids"], f"{label}: ids differ from plain")
            ok &= check(got["stats"].get("drafted", 0) > 0, f"{label}: nothing drafted")
            print(f"{label:90s} {'same ids' if ok else 'DIFFERENT'}  tau {got['stats'].get('tau', 0):.2f}")
        rc, out, err = run(base + ["--draft", paths["other-head"]])
        lines = [l for l in err.splitlines() if l.strip()]
        ok = check(rc == 1 and len(lines) == 1 and "error" in lines[0] and "EAGLE-3" in err and "width 128" in err,
                   f"eagle3 head for another target: exit {rc}, {err!r}")
        print(f"{'eagle3 head for another target':90s} {'ok' if ok else 'FAIL'}: {err.strip()}")
        drafter_files(paths["tiny"], paths["head"], d)


def gguf_metadata(path):
    """The file's metadata as node-llama-cpp's GGUF reader (an independent implementation) returns it."""
    src = os.environ.get("KITE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    p = subprocess.run([shutil.which("node") or "node", os.path.join(src, "tests", "oracle", "gguf_info.mjs"), path],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"gguf_info {path}: {p.stderr.strip()}")
    return json.loads(p.stdout)["metadata"] if p.returncode == 0 else None


def drafter_files(target, head, d):
    """`kite inspect` on the drafter files (an EAGLE-3 head, a DFlash drafter) says what they are and how
    to use them, with the target layers and block the metadata holds (read by node-llama-cpp); `kite run` and
    `kite tokenize` and `kite chat` on a drafter given as the model refuse it in one line that says to pass it with --draft."""
    dflash = os.path.join(d, "dflash.gguf")
    p = subprocess.run([KITE, "gen-model", "--shape", "dflash-b8", "--target", target, "--out", dflash], capture_output=True, timeout=120)
    if not check(p.returncode == 0, f"gen-model dflash-b8: {p.stderr.decode(errors='replace')}"):
        return
    for arch, path in (("eagle3", head), ("dflash", dflash)):
        meta = gguf_metadata(path)
        if meta is None:
            continue
        p = subprocess.run([KITE, "inspect", path], capture_output=True, text=True, timeout=60)
        out = p.stdout
        layers = ", ".join(str(x) for x in meta[arch]["target_layers"])
        ok = check(p.returncode == 0 and f"architecture:   {arch} (a drafter: kite run --model TARGET --draft {path})" in out,
                   f"inspect {arch}: exit {p.returncode}, {out!r} {p.stderr!r}")
        ok &= check(f"target layers:  {layers} (" in out, f"inspect {arch}: target layers not {layers}: {out!r}")
        if arch == "dflash":
            block, mask = meta["dflash"]["block_size"], meta["tokenizer"]["ggml"]["mask_token_id"]
            ok &= check(block == 8 and f"block:          {block} rows (the anchor and {block - 1} drafted tokens), mask token {mask}" in out,
                        f"inspect dflash: block {block}, mask {mask}: {out!r}")
        print(f"{'inspect ' + arch + ' drafter':90s} {'ok' if ok else 'FAIL'}: target layers {layers}")
        for verb in (["run", "--model", path, "--prompt", "Once", "--max-tokens", "2"], ["tokenize", "--model", path],
                     ["chat", "--model", path]):
            p = subprocess.run([KITE] + verb, input="Once", capture_output=True, text=True, timeout=60)
            lines = [l for l in p.stderr.splitlines() if l.strip()]
            ok = check(p.returncode == 1 and len(lines) == 1 and "not a model to run" in lines[0] and "--draft" in lines[0]
                       and p.stdout == "", f"{verb[0]} on the {arch} drafter: exit {p.returncode}, {p.stderr!r}")
            print(f"{verb[0] + ' on the ' + arch + ' drafter refused':90s} {'ok' if ok else 'FAIL'}: {p.stderr.strip()}")


def bench_spec():
    """`kite bench --spec` on two small prompt sets: the JSON has every category at both temperatures,
    speculation reproduced plain decoding, the oracle's tau is the hand-computed one, the plot is SVG."""
    import tempfile
    import xml.etree.ElementTree as ET
    data = os.path.join(DATA, "data")
    target = ["--model", os.path.join(M, "tinystories-656k")]
    base = ["bench", "--spec", "--threads", "1", "--sets", "mt_bench,humaneval", "--spec-prompts", "2", "--gen-tokens", "8",
            "--data", data, "--json", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in (("ngram", ["--draft", "ngram"]),
                             ("model", ["--draft", PAIRS[1][2], "--spec-budget", "3", "--spec-tree", "2"]),
                             ("oracle", ["--oracle-acceptance", "1", "--spec-budget", "4"])):
            svg = os.path.join(tmp, label + ".svg")
            p = subprocess.run([KITE] + base + target + extra + ["--plot", svg], capture_output=True, timeout=600)
            if not check(p.returncode == 0, f"bench --spec {label}: exit {p.returncode}: {p.stderr.decode(errors='replace')}"):
                continue
            out = json.loads(p.stdout)
            check(out["drafter"] == label, f"bench --spec {label}: drafter {out['drafter']}")
            if label == "oracle":
                check("oracle" in out["label"] and out["oracle_acceptance"] == 1, f"oracle not labelled: {out['label']}")
            temps = [r["temperature"] for r in out["results"]]
            check(temps == [0, 1], f"bench --spec {label}: temperatures {temps}")
            for r in out["results"]:
                names = [c["name"] for c in r["categories"]]
                check(names == ["mt_bench", "humaneval"], f"bench --spec {label}: categories {names}")
                for c in r["categories"] + [r["all"]]:
                    check(c["identical_to_plain"] == c["prompts"], f"bench --spec {label} T {r['temperature']} {c['name']}: "
                          f"{c['identical_to_plain']} of {c['prompts']} identical")
                    check(c["tokens"] == 8 * c["prompts"], f"bench --spec {label}: {c['tokens']} tokens")
                    for k in ("tau", "acceptance_by_depth", "plain_decode_tok_s", "spec_decode_tok_s", "speedup"):
                        check(k in c, f"bench --spec {label}: {k} missing")
                    if label == "oracle":
                        # 8 tokens: the first from the prompt, 7 in passes of 5 (4 drafted, all accepted, + 1): 2 passes
                        check(c["target_passes"] == 2 * c["prompts"] and abs(c["tau"] - 3.5) < 1e-9,
                              f"oracle tau {c['tau']} over {c['target_passes']} passes")
            root = ET.parse(svg).getroot()
            bars = [e for e in root.iter() if e.tag.endswith("rect") and e.find("{http://www.w3.org/2000/svg}title") is not None]
            check(len(bars) == 2 * 2 * 3, f"bench --spec {label}: {len(bars)} bars in the plot, want 12")
            print(f"bench --spec {label:60s} ok")
    for label, args, want_rc, word in (
            ("missing data", target + ["--data", "/nonexistent-kite-data"], 1, "--data"),
            ("draft and oracle", target + ["--draft", "ngram", "--oracle-acceptance", "0.5"], 2, "not both"),
            ("oracle out of range", target + ["--oracle-acceptance", "1.5"], 2, "--oracle-acceptance"),
            ("unknown set", target + ["--sets", "nope"], 2, "nope"),
            ("incompatible draft", target + ["--draft", PAIRS[0][2], "--tokenizer", TOK512], 1, "vocabulary (512 tokens)")):
        p = subprocess.run([KITE, "bench", "--spec", "--threads", "1", "--quiet"] + args, capture_output=True, timeout=300)
        err = p.stderr.decode(errors="replace")
        lines = [l for l in err.splitlines() if l.strip()]
        ok = check(p.returncode == want_rc, f"bench --spec {label}: exit {p.returncode}, want {want_rc}: {err.strip()}")
        ok &= check(len(lines) == 1 and word in err, f"bench --spec {label}: {err!r}")
        print(f"bench --spec {label:60s} {'ok' if ok else 'FAIL'}: {err.strip()}")


def main():
    for name, target, draft in PAIRS:
        for sampling in (["--temperature", "0"], ["--temperature", "1", "--seed", "42"],
                         ["--temperature", "0.7", "--top-k", "40", "--top-p", "0.9", "--seed", "7"]):
            base = target + ["--prompt", "Once upon a time", "--max-tokens", "48", "--ignore-eos"] + sampling
            plain = run_json(base)
            if plain is None:
                continue
            check(len(plain["ids"]) == 48, f"{name}: plain generated {len(plain['ids'])} tokens")
            check(not any(k in plain["stats"] for k in SPEC_KEYS), f"{name}: plain run reports speculative stats")
            for spec in (["--draft", draft, "--spec-budget", "4"],
                         ["--draft", draft, "--spec-budget", "6", "--spec-tree", "3"],
                         ["--draft", draft],  # adaptive budget
                         ["--draft", "ngram", "--spec-budget", "8"]):
                got = run_json(base + spec)
                if got is None:
                    continue
                label = f"{name} {' '.join(sampling)} {' '.join(s if '/' not in s else os.path.basename(s) for s in spec)}"
                ok = check(got["ids"] == plain["ids"], f"{label}: ids differ from plain")
                st = got["stats"]
                for k in SPEC_KEYS:
                    check(k in st, f"{label}: stats.{k} missing")
                if not all(k in st for k in SPEC_KEYS):
                    continue
                passes, acc, drafted = st["target_passes"], st["accepted"], st["drafted"]
                check(passes > 0 and 0 <= acc <= drafted, f"{label}: passes {passes}, accepted {acc}, drafted {drafted}")
                # 48 tokens: the first from the prompt's logits, the other 47 from the passes
                check(acc + passes == 47, f"{label}: accepted {acc} + passes {passes} != 47")
                check(abs(st["tau"] - (acc + passes) / passes) < 1e-9, f"{label}: tau {st['tau']}")
                depth = st["acceptance_by_depth"]
                check(isinstance(depth, list) and all(0 <= a <= 1 for a in depth), f"{label}: acceptance_by_depth {depth}")
                if "--spec-budget" in spec:
                    budget = int(spec[spec.index("--spec-budget") + 1])
                    check(len(depth) <= budget, f"{label}: {len(depth)} depths for budget {budget}")
                check(st["draft_ms"] >= 0 and st["verify_ms"] > 0, f"{label}: draft_ms {st['draft_ms']} verify_ms {st['verify_ms']}")
                check(st["generated_tokens"] == 48, f"{label}: generated_tokens {st['generated_tokens']}")
                print(f"{label:90s} {'same ids' if ok else 'DIFFERENT'}  tau {st['tau']:.2f}")

    # Bad input: a one-line error and exit 1 (2 for a malformed option).
    p0, p1 = PAIRS[:2]
    bad = [
        ("incompatible draft (vocabulary 2048 for a 512 target)",
         p0[1] + ["--prompt", "Once", "--draft", p1[2]], 1, ("2048", "512")),
        ("incompatible draft (stories260K for TinyStories-656K, no tokenizer of its own)",
         p1[1] + ["--prompt", "Once", "--draft", p0[2]], 1, ("draft model", "tokenizer")),
        ("draft file that does not exist", p1[1] + ["--prompt", "Once", "--draft", os.path.join(M, "nope.gguf")], 1,
         ("draft model", "nope.gguf")),
        ("draft file that is not a model", p1[1] + ["--prompt", "Once", "--draft", os.path.join(DATA, "data", "README.md")], 1,
         ("draft model", "README.md")),
        ("budget out of range", p1[1] + ["--prompt", "Once", "--draft", "ngram", "--spec-budget", "33"], 2, ("--spec-budget",)),
        ("budget zero", p1[1] + ["--prompt", "Once", "--draft", "ngram", "--spec-budget", "0"], 2, ("--spec-budget",)),
        ("tree width out of range", p1[1] + ["--prompt", "Once", "--draft", "ngram", "--spec-tree", "9"], 2, ("--spec-tree",)),
        ("rejection on a tree", p1[1] + ["--prompt", "Once", "--draft", "ngram", "--spec-tree", "2", "--spec-verify", "rejection"],
         1, ("chain",)),
        ("unknown verification", p1[1] + ["--prompt", "Once", "--draft", "ngram", "--spec-verify", "coin"], 2, ("--spec-verify",)),
    ]
    for label, args, want_rc, words in bad:
        rc, out, err = run(args + ["--max-tokens", "4"])
        lines = [l for l in err.splitlines() if l.strip()]
        ok = check(rc == want_rc, f"{label}: exit {rc}, want {want_rc} ({err.strip()})")
        ok &= check(len(lines) == 1 and "error" in lines[0], f"{label}: stderr is not one error line: {err!r}")
        ok &= check(out == "", f"{label}: printed to stdout: {out!r}")
        for w in words:
            ok &= check(w in err, f"{label}: error does not mention {w!r}: {err.strip()}")
        print(f"{label:90s} {'ok' if ok else 'FAIL'}: {err.strip()}")

    bench_spec()
    eagle3_cli()
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
