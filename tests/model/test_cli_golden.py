#!/usr/bin/env python3
"""Greedy `kite run --json` reproduces greedy_ids of every case in reference_greedy.json (the .bin,
.gguf and safetensors models), and the JSON output has the documented shape. Each case runs with the
f32 KV cache (the reference's own precision) and with the default f16 cache."""
import json
import os
import subprocess
import sys

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
NEAR_TIE = 1e-3

def main():
    ref = json.load(open(os.path.join(DATA, "models", "reference_greedy.json")))
    failures = 0
    runs = [(i, case, cache) for i, case in enumerate(ref["cases"]) for cache in ("f32", "f16")]
    for i, case, cache in runs:
        model = os.path.join(DATA, "models", case["model"])
        cmd = [KITE, "run", "--model", model, "--temperature", "0", "--max-tokens", str(len(case["greedy_ids"])),
               "--ignore-eos", "--threads", "2", "--json", "--quiet", "--cache-type", cache]
        if model.endswith(".bin"):
            cmd += ["--tokenizer", os.path.join(DATA, "models", case["tokenizer"])]
        # The reference prompt ids come from a merge-rank BPE (the HF tokenizer.json). The Q8_0 GGUF of
        # TinyStories-656K carries a SentencePiece vocabulary with scores that llama.cpp (and kite)
        # split differently; shared/models/README.md says to feed those ids, so that case does.
        by_ids = "656k" in case["model"] and case["model"].endswith(".gguf")
        if by_ids:
            cmd += ["--prompt-ids", ",".join(map(str, case["prompt_ids"]))]
        else:
            cmd += ["--prompt", case["prompt"]]
        p = subprocess.run(cmd, capture_output=True, timeout=300)
        if p.returncode != 0:
            print(f"case {i}: kite failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
            failures += 1
            continue
        out = json.loads(p.stdout)
        for key in ("prompt_ids", "ids", "text", "stats"):
            assert key in out, f"missing {key}"
        for key in ("prompt_tokens", "generated_tokens", "ttft_ms", "prefill_tok_s", "decode_tok_s"):
            assert key in out["stats"], f"missing stats.{key}"
        assert out["stats"]["prompt_tokens"] == len(case["prompt_ids"])
        assert out["stats"]["generated_tokens"] == len(out["ids"])
        if out["prompt_ids"] != case["prompt_ids"]:
            print(f"case {i}: prompt ids {out['prompt_ids']} != reference {case['prompt_ids']}")
            failures += 1
            continue
        got, want = out["ids"], case["greedy_ids"]
        n = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
        # Divergence is allowed only at a near-tie: for float models where the reference's own margin
        # goes under 1e-3 (after 8 tokens with the exact f32 cache, 6 with the f16 cache's rounding);
        # for quantized (int8-activation) models after the first tokens, where test_golden checks
        # kite's margin step by step (see its header comment).
        quantized = case["model"].endswith(".gguf") and "q8_0" in case["model"]
        ok = (got == want or (case["min_margin"] < NEAR_TIE and n >= (8 if cache == "f32" else 6))
              or (quantized and n >= 6))
        print(f"case {i:2d} {cache} {case['model']:45s} {case['prompt']!r:34s} {n}/{len(want)} match"
              + ("" if got == want else f" (diverges at a near-tie, reference min margin {case['min_margin']})" if ok else " FAIL"))
        if not ok:
            failures += 1
    # The text is the detokenized ids: the first case starts like llama2.c's documented sample.
    print(f"{len(runs) - failures} passed, {failures} failed")
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
