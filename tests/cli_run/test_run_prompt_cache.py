#!/usr/bin/env python3
"""kite run --prompt-cache FILE: the first run processes the whole prompt and saves its state; a second
run with the same prompt loads it, processes only the last prompt token and generates the same tokens
(greedy and seeded) with a shorter prefill; a prompt that extends the cached one reuses the shared prefix;
a damaged file, a file of another model and a file longer than --ctx are warned about and ignored (the
output stays that of a run without a cache) and the file is rewritten."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_run_util import S260, TINY, Tally, run_json  # noqa: E402

t = Tally()
tmp = tempfile.mkdtemp(prefix="kite-prompt-cache-")
cache = os.path.join(tmp, "prompt.kvc")
PROMPT = "Once upon a time there was a little girl named Lily. She loved to play in the park. " * 12
for label, sampling in (("greedy", ["--temperature", "0"]), ("seeded", ["--temperature", "0.9", "--seed", "11"])):
    if os.path.exists(cache):
        os.unlink(cache)
    base = S260 + sampling + ["-p", PROMPT, "-n", "24"]
    rc, plain, _ = run_json(base)
    rc1, first, err1 = run_json(base + ["--prompt-cache", cache])
    rc2, second, err2 = run_json(base + ["--prompt-cache", cache])
    n = len(plain["prompt_ids"]) if plain else 0
    t.check(f"{label}: the first run processes the whole prompt and writes the file", first is not None and os.path.exists(cache)
            and first["stats"]["prompt_tokens"] == n and first["stats"]["prompt_cached"] == 0, err1)
    t.check(f"{label}: the second run processes only the last prompt token", second is not None
            and second["stats"]["prompt_tokens"] == 1 and second["stats"]["prompt_cached"] == n - 1, err2)
    t.check(f"{label}: same tokens with and without the cache", plain is not None and first is not None and second is not None
            and plain["ids"] == first["ids"] == second["ids"] and plain["text"] == second["text"])
    t.check(f"{label}: a shorter prefill and time to first token", second is not None and first is not None
            and second["stats"]["prefill_ms"] < first["stats"]["prefill_ms"] and second["stats"]["ttft_ms"] < first["stats"]["ttft_ms"],
            f"{first and first['stats']} {second and second['stats']}")

# A longer prompt starting with the cached one: only the new part is processed.
longer = PROMPT + "One day she found a ball."
rc, ref, _ = run_json(S260 + ["--temperature", "0", "-p", longer, "-n", "16"])
rc, got, err = run_json(S260 + ["--temperature", "0", "-p", longer, "-n", "16", "--prompt-cache", cache])
n_old = len(ref["prompt_ids"]) if ref else 0
t.check("an extended prompt reuses the shared prefix", got is not None and ref is not None and got["ids"] == ref["ids"]
        and 0 < got["stats"]["prompt_tokens"] < 12 and got["stats"]["prompt_cached"] + got["stats"]["prompt_tokens"] == n_old, err)

# Files that must not load: each gives a warning, the plain output, and a rewritten file.
rc, plain, _ = run_json(S260 + ["--temperature", "0", "-p", PROMPT, "-n", "8"])
good = open(cache, "rb").read()
rc, _, _ = run_json(TINY + ["--temperature", "0", "-p", "Once upon a time", "-n", "2", "--prompt-cache", os.path.join(tmp, "tiny.kvc")])
cases = (("a truncated file", good[: len(good) // 2], "truncated"),
         ("a damaged file", good[:100] + bytes([good[100] ^ 0xFF]) + good[101:], "checksum"),
         ("not a session file", b"hello world, not a cache" * 4, "magic"),
         ("a file of another model", open(os.path.join(tmp, "tiny.kvc"), "rb").read(), "another model"))
for label, content, needle in cases:
    open(cache, "wb").write(content)
    rc, got, err = run_json(S260 + ["--temperature", "0", "-p", PROMPT, "-n", "8", "--prompt-cache", cache])
    t.check(f"{label}: a warning, the output of a run without a cache", rc == 0 and got is not None and plain is not None
            and got["ids"] == plain["ids"] and "warning: --prompt-cache" in err and needle in err
            and got["stats"]["prompt_cached"] == 0, err)
    t.check(f"{label}: the file is rewritten", open(cache, "rb").read() != content)
open(cache, "wb").write(good)
rc, got, err = run_json(S260 + ["--temperature", "0", "-p", "Once upon a time", "-n", "4", "--ctx", "64", "--prompt-cache", cache])
t.check("a file longer than --ctx is ignored with a warning", rc == 0 and got is not None and "do not fit" in err, err)
t.finish()
