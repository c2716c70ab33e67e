#!/usr/bin/env python3
"""How kite run ends, checked on real processes: a full context is a normal stop (exit 0, "stopped":
"length", a note on stderr, the tokens that fitted: n_ctx - n_prompt + 1, the same tokens a roomy
context gives); SIGINT mid-generation still prints the --json object ("stopped": "interrupted", exit 130,
its ids a prefix of the uninterrupted run); stop strings cut the text exactly where the unstopped text
first holds one; control tokens are never printed (TinyStories-656K spells <|end_story|> in plain pieces
before its end token: the text is the reference decode, from tokenizer.json's vocabulary, up to the
marker; a control token forced by --logit-bias prints nothing); --logit-bias and --logprobs."""
import json
import math
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_run_util import KITE, S260, TINY, TINY_DIR, Tally, kite, run_json  # noqa: E402

t = Tally()
GREEDY = ["--temperature", "0"]

# ---- a full context ----------------------------------------------------------------------------------
rc, full, err = run_json(S260 + GREEDY + ["-p", "Once upon a time", "--ctx", "40", "--max-tokens", "500", "--ignore-eos"])
n_prompt = len(full["prompt_ids"]) if full else 0
t.check("context full: exit 0 with the JSON object", rc == 0 and full is not None, f"rc={rc} err={err!r}")
if full:
    t.check("context full: stopped length, context_full", full.get("stopped") == "length" and full.get("context_full") is True,
            json.dumps({k: full.get(k) for k in ("stopped", "context_full")}))
    t.check("context full: the tokens that fit (n_ctx - n_prompt + 1)", len(full["ids"]) == 40 - n_prompt + 1,
            f"{len(full['ids'])} ids, prompt {n_prompt}")
    t.check("context full: a note on stderr, no error", "context of 40 tokens is full" in err and "error" not in err, err)
    rc2, roomy, _ = run_json(S260 + GREEDY + ["-p", "Once upon a time", "--max-tokens", str(len(full["ids"])), "--ignore-eos"])
    t.check("context full: the same tokens as a roomy context", roomy is not None and roomy["ids"] == full["ids"]
            and roomy["text"] == full["text"] and roomy["stopped"] == "length" and "context_full" not in roomy)
rc, out, err = kite(["run"] + S260 + GREEDY + ["-p", "Once upon a time", "-c", "24", "-n", "500", "--ignore-eos", "-q"])
t.check("context full, plain text: exit 0, the text printed", rc == 0 and len(out.strip()) > 20 and "is full" in err, f"rc={rc} {out!r} {err!r}")
rc, obj, err = run_json(S260 + ["-p", "Once upon a time there was a girl", "--ctx", "4"])
t.check("a prompt longer than the context is an error (exit 1), still a JSON object",
        rc == 1 and obj is not None and obj.get("stopped") == "error" and "context" in obj.get("error", ""), f"rc={rc} {obj} {err!r}")

# ---- SIGINT with --json ----------------------------------------------------------------------------------
LONG = S260 + GREEDY + ["-p", "Once upon a time", "--ctx", "200000", "--max-tokens", "190000", "--ignore-eos", "--json", "-q"]
p = subprocess.Popen([KITE, "run"] + LONG, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
time.sleep(1.5)
p.send_signal(signal.SIGINT)
out, err = p.communicate(timeout=60)
try:
    obj = json.loads(out)
except ValueError:
    obj = None
t.check("SIGINT --json: exit 130 and a valid JSON object", p.returncode == 130 and obj is not None,
        f"rc={p.returncode} out={out[:200]!r} err={err[-300:]!r}")
if obj:
    n = len(obj["ids"])
    t.check("SIGINT --json: stopped interrupted, partial output", obj.get("stopped") == "interrupted" and 0 < n < 190000
            and obj["stats"]["generated_tokens"] == n, f"stopped={obj.get('stopped')} n={n}")
    rc, ref, _ = run_json(S260 + GREEDY + ["-p", "Once upon a time", "--ctx", str(n + 16), "--max-tokens", str(n), "--ignore-eos"])
    t.check("SIGINT --json: the ids are those of the uninterrupted run", ref is not None and ref["ids"] == obj["ids"])
p = subprocess.Popen([KITE, "run"] + LONG[:-2], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
time.sleep(1.5)
p.send_signal(signal.SIGINT)
out, err = p.communicate(timeout=60)
t.check("SIGINT, plain text: exit 130, the text so far printed, a note", p.returncode == 130 and len(out) > 100
        and b"kite: interrupted" in err, f"rc={p.returncode} {len(out)} bytes {err[-200:]!r}")

# ---- stop strings ------------------------------------------------------------------------------------------
rc, free, _ = run_json(S260 + GREEDY + ["-p", "Once upon a time", "--max-tokens", "120"])
text = free["text"] if free else ""
for stops in (["Lily"], ["park", "named"], [" was a"], ["ZZZ-never"]):
    args = S260 + GREEDY + ["-p", "Once upon a time", "--max-tokens", "120"]
    for s in stops:
        args += ["--stop", s]
    rc, got, err = run_json(args)
    hits = [text.find(s) for s in stops if s in text]
    want = text[:min(hits)] if hits else text
    t.check(f"--stop {stops}: the text up to the first stop string", rc == 0 and got is not None and got["text"] == want
            and got["stopped"] == ("stop" if hits else "length"), f"got={got and got['text']!r} want={want!r}")
rc, out, err = kite(["run"] + S260 + GREEDY + ["-p", "Once upon a time", "-n", "120", "--stop", "Lily", "-q"])
t.check("--stop, plain text", rc == 0 and out.decode() == text[:text.find("Lily")] + "\n", repr(out))
rc, out, err = kite(["run"] + S260 + ["-p", "x", "--stop", ""])
t.check("--stop '' is a usage error", rc == 2 and "--stop" in err, err)

# ---- control tokens are never printed ---------------------------------------------------------------------
tok = json.load(open(os.path.join(TINY_DIR, "tokenizer.json"), encoding="utf-8"))
vocab = {i: s for s, i in tok["model"]["vocab"].items()}
special = {a["id"] for a in tok["added_tokens"] if a.get("special")}


def reference_decode(ids):
    """tokenizer.json's pieces back to text (▁ = space, <0xNN> = a byte), special tokens included as text."""
    out = b""
    for i in ids:
        piece = vocab[i]
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            out += bytes([int(piece[3:5], 16)])
        else:
            out += piece.replace("\u2581", " ").encode()
    return out.decode("utf-8", errors="replace")


rc, story, err = run_json(TINY + GREEDY + ["-p", "Once upon a time", "--max-tokens", "300"])
ok = story is not None
ref = reference_decode([i for i in story["ids"] if i not in special]) if ok else ""
t.check("TinyStories-656K writes its end marker in plain pieces (the case under test)", ok and "<|end_story|>" in ref, ref[-80:])
t.check("... and kite prints none of it: the text ends before the marker, stopped stop",
        ok and "<|" not in story["text"] and story["text"] == ref[:ref.find("<|end_story|>")] and story["stopped"] == "stop",
        f"{story and story['text'][-60:]!r}")
rc, out, err = kite(["run"] + TINY + GREEDY + ["-p", "Once upon a time", "-n", "300", "-q"])
t.check("no end-marker text in plain output either", rc == 0 and b"end_story" not in out and b"<|" not in out, out[-80:])
# <|start_story|> (id 1) is a control token and not an end token: forced, it is generated and prints nothing.
rc, forced, err = run_json(TINY + GREEDY + ["-p", "Once upon a time", "-n", "5", "--logit-bias", "1=100"])
t.check("a forced control token is generated and prints no text", forced is not None and forced["ids"] == [1] * 5
        and forced["text"] == "", f"{forced}")

# ---- logit bias and log-probabilities -------------------------------------------------------------------
first = free["ids"][0] if free else -1
rc, banned, err = run_json(S260 + GREEDY + ["-p", "Once upon a time", "-n", "4", "--logit-bias", f"{first}=-inf"])
t.check("--logit-bias ID=-inf: the greedy token never comes", banned is not None and first not in banned["ids"], f"{banned}")
rc, obj, err = run_json(S260 + GREEDY + ["-p", "Once upon a time", "-n", "4", "--logit-bias", "42=+50", "--logit-bias", "43=60"])
t.check("--logit-bias repeatable (the largest bias wins)", obj is not None and obj["ids"] == [43] * 4, f"{obj}")
rc, out, err = kite(["run"] + S260 + ["-p", "x", "--logit-bias", "nope"])
t.check("--logit-bias without ID=BIAS is a usage error", rc == 2 and "--logit-bias" in err, err)
rc, lp, err = run_json(S260 + GREEDY + ["-p", "Once upon a time", "-n", "6", "--logprobs", "3"])
ok = lp is not None and len(lp.get("logprobs", [])) == 6
for k, e in enumerate(lp["logprobs"] if ok else []):
    probs = [math.exp(x["logprob"]) for x in e["top"]]
    ok &= e["id"] == lp["ids"][k] and len(e["top"]) == 3 and e["top"][0]["id"] == e["id"]  # greedy: the top token
    ok &= abs(e["top"][0]["logprob"] - e["logprob"]) < 1e-6 and sum(probs) <= 1 + 1e-5
    ok &= all(e["top"][j]["logprob"] >= e["top"][j + 1]["logprob"] for j in range(2))
t.check("--logprobs 3: per token, its log-probability and 3 alternatives, most likely first", ok, json.dumps(lp)[:300])
rc, out, err = kite(["run"] + S260 + ["-p", "x", "--logprobs", "3"])
t.check("--logprobs without --json is a usage error", rc == 2, err)
t.finish()
