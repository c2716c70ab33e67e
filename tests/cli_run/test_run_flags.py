#!/usr/bin/env python3
"""kite's flags as llama.cpp users type them: -m -p -n -t -c -s --temp give the JSON of the long
forms (kite chat takes them too); kite help VERB prints kite VERB --help; usage errors exit 2 on every
verb (an unknown option, a missing value, a bad number) with one error line; --threads above the CPU
count and --ctx above the trained context warn on stderr and still run (kite run and kite chat); a llama2.c tokenizer .bin of
another vocabulary (Llama-2's 32000 pieces for stories260K's 512) is refused with a clear error; kite
bench fits its default lengths into stories260K.bin's context of 512."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_run_util import MODELS, S260, TINY, TOK512, Tally, kite, run_json  # noqa: E402

t = Tally()

# ---- short flags -------------------------------------------------------------------------------------------
LONG = ["--model", S260[1], "--tokenizer", S260[3], "--prompt", "Once upon a time", "--max-tokens", "12", "--threads", "1",
        "--ctx", "64", "--seed", "7", "--temperature", "0.9"]
SHORT = ["-m", S260[1], "--tokenizer", S260[3], "-p", "Once upon a time", "-n", "12", "-t", "1", "-c", "64", "-s", "7",
         "--temp", "0.9"]
rc, a, _ = run_json(LONG)
rc2, b, err = run_json(SHORT)
t.check("short flags give the long forms' output (sampled, seeded)", a is not None and b is not None and a["ids"] == b["ids"]
        and len(a["ids"]) == 12, err)
rc3, c, _ = run_json(LONG[:-6] + ["--seed", "8", "--temperature", "0.9"])
t.check("... and the seed matters (the check can fail)", c is not None and c["ids"] != a["ids"])
rc, out, err = kite(["chat", "-m", os.path.join(MODELS, "tinystories-656k"), "--chat-template",
                     os.path.join(os.environ["KITE_SOURCE_DIR"], "tests", "cli_chat", "tiny-chatml.jinja"),
                     "-n", "4", "-t", "1", "-c", "128", "-s", "3", "--temp", "0"], input=b"Hello\n")
t.check("kite chat takes the short flags", rc == 0, f"rc={rc} {err!r}")

# ---- kite help VERB ----------------------------------------------------------------------------------------
for verb in ("run", "chat", "tokenize", "detokenize", "serve", "bench", "inspect", "grammar", "template", "gen-model"):
    rc, helped, _ = kite(["help", verb])
    rc2, direct, _ = kite([verb, "--help"])
    t.check(f"kite help {verb} = kite {verb} --help", rc == 0 and rc2 == 0 and helped == direct and b"usage" in helped)
rc, _, err = kite(["help", "frobnicate"])
t.check("kite help of an unknown verb: exit 2", rc == 2 and "frobnicate" in err, err)

# ---- usage errors exit 2 -----------------------------------------------------------------------------------
for verb in ("run", "chat", "tokenize", "detokenize", "serve", "bench", "inspect", "grammar", "template", "gen-model"):
    for label, extra in (("an unknown option", ["--frobnicate"]), ("an unknown option with a value", ["--frobnicate", "1"]),
                         ("a missing value", ["--threads"]), ("a bad number", ["--threads", "many"])):
        rc, _, err = kite([verb] + extra, input=b"")
        lines = [l for l in err.splitlines() if l.strip()]
        t.check(f"{verb}: {label} exits 2 with one error line", rc == 2 and len(lines) >= 1 and lines[0].startswith(("kite: error: ", "kite serve: error: ")),
                f"rc={rc} err={err!r}")
rc, _, err = kite(["run", "-m", S260[1], "--tokenizer", S260[3], "-x"])
t.check("run: an unknown short option exits 2 naming it", rc == 2 and "-x" in err, err)
rc, _, err = kite(["frobnicate"])
t.check("an unknown verb exits 2", rc == 2, err)

# ---- warnings ----------------------------------------------------------------------------------------------
cpus = os.cpu_count() or 1
rc, obj, err = run_json(S260 + ["-p", "Once", "-n", "3", "--threads", str(cpus + 1), "--ctx", "1024"])
t.check("--threads above the CPU count: a warning, and it runs", rc == 0 and obj is not None
        and f"--threads {cpus + 1} is more than the {cpus} CPUs" in err, err)
t.check("--ctx above the trained context (512): a warning", "--ctx 1024 is more than the 512 tokens" in err, err)
rc, obj, err = run_json(S260 + ["-p", "Once", "-n", "3", "--threads", "1", "--ctx", "512"])
t.check("no warning within the limits", rc == 0 and "warning" not in err, err)
rc, out, err = kite(["chat", "-m", os.path.join(MODELS, "tinystories-656k"), "--chat-template",
                     os.path.join(os.environ["KITE_SOURCE_DIR"], "tests", "cli_chat", "tiny-chatml.jinja"),
                     "-n", "2", "-t", str(cpus + 1), "-c", "1024", "--temp", "0"], input=b"Hello\n")
t.check("kite chat warns the same way", rc == 0 and f"--threads {cpus + 1} is more than" in err
        and "--ctx 1024 is more than the 512 tokens" in err, f"rc={rc} {err!r}")

# ---- a mismatched llama2.c tokenizer -----------------------------------------------------------------------
wrong = os.path.join(MODELS, "llama2-tokenizer", "tokenizer.bin")
rc, out, err = kite(["run", "-m", S260[1], "--tokenizer", wrong, "-p", "Once", "-n", "3"])
lines = [l for l in err.splitlines() if l.strip()]
t.check("a llama2.c tokenizer of another vocabulary is refused (exit 1, one clear line)",
        rc == 1 and out == b"" and len(lines) == 1 and "32000" in err and "512" in err and "tokenizer.bin" in err, err)
rc, out, err = kite(["run", "-m", S260[1], "--tokenizer", os.path.join(MODELS, "tokenizers", "qwen3", "tokenizer.json"), "-p", "x"])
t.check("as a mismatched tokenizer.json is", rc == 1 and "tokenizer" in err, err)

# ---- SentencePiece .model tokenizers -------------------------------------------------------------------------
spm = os.path.join(TOK512, "tok512.model")
rc, via_model, err = run_json(["-m", S260[1], "--tokenizer", spm, "-p", "Lily and Tom went to the park", "-n", "16", "--temp", "0"])
rc2, via_bin, _ = run_json(S260 + ["-p", "Lily and Tom went to the park", "-n", "16", "--temp", "0"])
t.check("--tokenizer tok512.model gives tok512.bin's ids and text", via_model is not None and via_bin is not None
        and via_model["prompt_ids"] == via_bin["prompt_ids"] and via_model["ids"] == via_bin["ids"]
        and via_model["text"] == via_bin["text"], err)
rc, out, err = kite(["run", "-m", S260[1], "--tokenizer", os.path.join(MODELS, "llama2-tokenizer", "tokenizer.model"), "-p", "x"])
t.check("a .model of another vocabulary is refused naming it", rc == 1 and "tokenizer.model has 32000 tokens" in err, err)

# ---- kite bench on a small context -------------------------------------------------------------------------
rc, out, err = kite(["bench"] + S260 + ["--no-hw", "--reps", "1", "--json"], timeout=120)
try:
    bench = json.loads(out)
except ValueError:
    bench = None
t.check("kite bench fits its default lengths into a context of 512", rc == 0 and bench is not None and "511" in err, f"rc={rc} {err!r}")
rc, out, err = kite(["bench"] + S260 + ["--no-hw", "--reps", "1", "--prompt-tokens", "600"], timeout=120)
t.check("lengths given on the command line that do not fit are refused", rc == 1 and "512" in err, err)

# ---- quantized KV caches -----------------------------------------------------------------------------------
rc, out, err = kite(["run"] + TINY + ["-p", "Once", "-n", "3", "--cache-type", "q8_0"])
t.check("--cache-type q8_0 on heads of 16 elements: exit 1, the reason and the way out", rc == 1 and "multiple of 32" in err
        and "16" in err and "f16" in err, err)
rc, out, err = kite(["run"] + TINY + ["-p", "Once", "-n", "3", "--cache-type", "q5_1"])
t.check("an unknown --cache-type is a usage error", rc == 2 and "q8_0" in err, err)
tmp = tempfile.mkdtemp(prefix="kite-kvq-")
tiny64 = os.path.join(tmp, "tiny.gguf")  # heads of 64
rc, _, err = kite(["gen-model", "--shape", "tiny", "--type", "q8_0", "--tokenizer", S260[3], "--out", tiny64], timeout=120)
assert rc == 0, err
for cache_type in ("q8_0", "q4_0"):
    base = ["-m", tiny64, "-p", "Once upon a time", "-n", "16", "--temperature", "0", "--cache-type", cache_type]
    rc, plain, err = run_json(base)
    cache = os.path.join(tmp, f"{cache_type}.kvc")
    rc1, first, _ = run_json(base + ["--prompt-cache", cache])
    rc2, second, err2 = run_json(base + ["--prompt-cache", cache])
    t.check(f"--cache-type {cache_type} runs, and its session file gives the same tokens", plain is not None and len(plain["ids"]) == 16
            and first is not None and second is not None and plain["ids"] == first["ids"] == second["ids"]
            and second["stats"]["prompt_cached"] > 0, err + err2)
    rc, other, err = run_json(["-m", tiny64, "-p", "Once upon a time", "-n", "16", "--temperature", "0", "--prompt-cache", cache])
    t.check(f"a {cache_type} session file is not loaded into an f16 session (a warning naming both)",
            other is not None and f"KV cache is {cache_type}" in err and "f16" in err, err)
t.finish()
