#!/usr/bin/env python3
"""kite gen-model and kite bench through the CLI: every type of the tiny shape writes a file that
`kite run` loads and generates from; `kite bench --json` reports every promised key with sane
values (no timing assertions); bad arguments give one-line errors."""
import json
import os
import subprocess
import sys
import tempfile

KITE = os.environ["KITE_BIN"]
DATA = os.environ.get("KITE_TEST_DATA", "../shared")
passed = failed = 0


def kite(*args, timeout=120):
    return subprocess.run([KITE, *args], capture_output=True, text=True, timeout=timeout)


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def one_line_error(name, r, code):
    lines = r.stderr.strip().splitlines()
    check(name, r.returncode == code and len(lines) == 1 and "error" in lines[0] and not r.stdout,
          f"exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")


with tempfile.TemporaryDirectory() as tmp:
    models = {}
    for t in ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"]:
        path = os.path.join(tmp, f"tiny-{t}.gguf")
        r = kite("gen-model", "--shape", "tiny", "--type", t, "--out", path, "--seed", "5")
        check(f"gen-model {t}", r.returncode == 0 and os.path.getsize(path) > 100_000, r.stderr)
        models[t] = path
        r = kite("run", "-m", path, "--prompt-ids", "1,70,71,72", "--max-tokens", "6", "--temperature", "0",
                 "--ignore-eos", "--json", "-q")
        ok = r.returncode == 0
        out = json.loads(r.stdout) if ok else {}
        check(f"run {t}", ok and len(out.get("ids", [])) == 6 and all(0 <= i < 512 for i in out["ids"]), r.stderr)
    # the same seed and type give the same file
    again = os.path.join(tmp, "again.gguf")
    kite("gen-model", "--shape", "tiny", "--type", "q4_0", "--out", again, "--seed", "5")
    check("gen-model deterministic", open(again, "rb").read() == open(models["q4_0"], "rb").read())

    # a tokenizer from the shared data goes into the file: the Llama-2 vocabulary makes tiny's vocab 32000
    tok = os.path.join(DATA, "models", "tinystories-tok512", "tok512.bin")
    path = os.path.join(tmp, "tiny-tok512.gguf")
    r = kite("gen-model", "--shape", "tiny", "--type", "q8_0", "--tokenizer", tok, "--out", path)
    check("gen-model with tokenizer", r.returncode == 0, r.stderr)
    r = subprocess.run([KITE, "tokenize", "--model", path, "--no-bos"], input="Once upon a time", capture_output=True, text=True)
    r2 = subprocess.run([KITE, "tokenize", "--tokenizer", tok, "--no-bos"], input="Once upon a time", capture_output=True, text=True)
    check("embedded tokenizer = source tokenizer", r.returncode == 0 and r.stdout == r2.stdout and r.stdout.strip(),
          f"{r.stdout!r} vs {r2.stdout!r} {r.stderr} {r2.stderr}")

    # kite bench --json: the keys and their sanity
    r = kite("bench", "--model", models["q4_0"], "--json", "--gen-tokens", "8", "--prompt-tokens", "16",
             "--batch-curve", "--reps", "2", "--threads", "2", "--hw-seconds", "0.3")
    check("bench runs", r.returncode == 0, r.stderr)
    b = json.loads(r.stdout) if r.returncode == 0 else {}
    for key in ["prefill_tok_s", "ttft_ms", "decode_tok_s", "bandwidth_gbs", "peak_rss_bytes", "prefill_gops"]:
        check(f"bench key {key}", isinstance(b.get(key), (int, float)) and b[key] > 0, b.get(key))
    check("bench batch curve keys", sorted(b.get("batch_curve", {}), key=int) == ["1", "2", "4", "8", "16", "32"], b.get("batch_curve"))
    check("bench batch curve positive", all(v > 0 for v in b.get("batch_curve", {}).values()))
    check("bench batch ratio", abs(b.get("batch_ratio", {}).get("1", 0) - 1.0) < 1e-9)
    check("bench threads", b.get("threads") == 2)
    check("bench kernels", isinstance(b.get("kernels"), str) and b["kernels"])
    check("bench model hash", isinstance(b.get("model_hash"), str) and len(b["model_hash"]) == 16)
    check("bench tokens", b.get("tokens_generated") == 8 and len(b.get("tokens_hash", "")) == 16)
    check("bench tokens stable", b.get("tokens_stable_across_reps") is True)
    check("bench decode bytes", 0 < b.get("decode_bytes_per_token", 0) <= b.get("weight_bytes", 0))
    hw = b.get("hw", {})
    check("bench hw", hw.get("read_gbs", 0) > 0 and hw.get("int8_gops", 0) > 0 and 0 < b.get("bandwidth_fraction", 0))
    check("bench prompts", [p["prompt_tokens"] for p in b.get("prompts", [])] == [16])
    # the generated tokens are a function of the model and the prompt alone: a second run agrees
    r = kite("bench", "--model", models["q4_0"], "--json", "--gen-tokens", "8", "--prompt-tokens", "16", "--reps", "1",
             "--threads", "1", "--no-hw")
    b2 = json.loads(r.stdout) if r.returncode == 0 else {}
    check("bench tokens hash across runs and thread counts", b2.get("tokens_hash") == b.get("tokens_hash"), (b2.get("tokens_hash"), b.get("tokens_hash")))
    check("bench --no-hw", "hw" not in b2 and "bandwidth_fraction" not in b2)
    # text report
    r = kite("bench", "--model", models["q8_0"], "--gen-tokens", "4", "--prompt-tokens", "8", "--reps", "1", "--no-hw")
    check("bench text", r.returncode == 0 and "decode" in r.stdout and "tokens hash" in r.stdout, r.stderr)

    r = kite("bench", "--hw", "--json", "--threads", "1", "--hw-seconds", "0.2")
    h = json.loads(r.stdout) if r.returncode == 0 else {}
    check("bench --hw", h.get("n_threads") == 1 and h.get("read_gbs_1t", 0) > 0 and h.get("f32_gflops", 0) > 0, r.stderr)

    # bad arguments: one line each, exit 2 for usage and 1 for failures
    # without --model: the bundled default model (512 tokens of context), its lengths shrunk to fit
    r = kite("bench", "--gen-tokens", "4", "--reps", "1", "--no-hw", "--json")
    fitted = [p["prompt_tokens"] for p in json.loads(r.stdout)["prompts"]] if r.returncode == 0 else []
    check("bench without --model uses the default model", r.returncode == 0 and "default model" in r.stderr
          and fitted and max(fitted) < 512, r.stderr)
    one_line_error("bench unknown option", kite("bench", "--model", models["q8_0"], "--frobnicate"), 2)
    one_line_error("bench bad threads", kite("bench", "--model", models["q8_0"], "--threads", "0"), 2)
    one_line_error("bench bad prompt list", kite("bench", "--model", models["q8_0"], "--prompt-tokens", "16,x"), 2)
    one_line_error("bench bad gen tokens", kite("bench", "--model", models["q8_0"], "--gen-tokens", "1"), 2)
    one_line_error("bench missing value", kite("bench", "--model"), 2)
    one_line_error("bench hw and model", kite("bench", "--hw", "--model", models["q8_0"]), 2)
    one_line_error("bench missing file", kite("bench", "--model", os.path.join(tmp, "nope.gguf")), 1)
    one_line_error("bench context too small", kite("bench", "--model", models["q8_0"], "--prompt-tokens", "600", "--no-hw"), 1)
    one_line_error("gen-model no shape", kite("gen-model", "--type", "q4_0", "--out", os.path.join(tmp, "x.gguf")), 2)
    one_line_error("gen-model no out", kite("gen-model", "--shape", "tiny", "--type", "q4_0"), 2)
    one_line_error("gen-model bad shape", kite("gen-model", "--shape", "gpt-5", "--type", "q4_0", "--out", os.path.join(tmp, "x.gguf")), 1)
    one_line_error("gen-model bad type", kite("gen-model", "--shape", "tiny", "--type", "q2", "--out", os.path.join(tmp, "x.gguf")), 1)
    one_line_error("gen-model bad seed", kite("gen-model", "--shape", "tiny", "--type", "q4_0", "--seed", "-3", "--out", os.path.join(tmp, "x.gguf")), 2)
    one_line_error("gen-model bad tokenizer", kite("gen-model", "--shape", "tiny", "--type", "q4_0", "--tokenizer", os.path.join(tmp, "none"), "--out", os.path.join(tmp, "x.gguf")), 1)
    check("gen-model wrote nothing on error", not os.path.exists(os.path.join(tmp, "x.gguf")))
    check("help lists bench", "bench" in kite("--help").stdout and "gen-model" in kite("--help").stdout)
    check("bench --help", kite("bench", "--help").returncode == 0)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
