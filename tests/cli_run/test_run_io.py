#!/usr/bin/env python3
"""kite's input and output as a shell uses them: stdout on a full disk (/dev/full) and on a pipe its
reader closed fail the command (exit 1, one error line; never a silent death by SIGPIPE) for run, run
--json and tokenize; the prompt from a file (--file, -f) and from stdin (-p -) gives the ids -p TEXT
gives; kite tokenize leaves out the newline echo adds (--keep-newline keeps it: the ids then equal those
of the text with its newline, as --prompt tokenizes it); kite detokenize inverts tokenize (ids on stdin
or --ids)."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_run_util import KITE, S260, TOK512, Tally, kite, run_json  # noqa: E402

t = Tally()
tmp = tempfile.mkdtemp(prefix="kite-cli-io-")
GREEDY = ["--temperature", "0"]
TOKENIZER = ["--tokenizer", os.path.join(TOK512, "tok512.bin")]

# ---- write errors ----------------------------------------------------------------------------------------
if os.path.exists("/dev/full"):
    for label, args, stdin in (("run", ["run"] + S260 + GREEDY + ["-p", "Once", "-n", "20", "-q"], None),
                               ("run --json", ["run"] + S260 + GREEDY + ["-p", "Once", "-n", "20", "-q", "--json"], None),
                               ("tokenize", ["tokenize"] + TOKENIZER, b"Once upon a time"),
                               ("detokenize", ["detokenize"] + TOKENIZER + ["--ids", "400 261"], None),
                               ("inspect", ["inspect"] + S260[1:], None)):
        with open("/dev/full", "wb") as full:
            rc, _, err = kite(args, input=stdin, stdout=full)
        lines = [l for l in err.splitlines() if l.strip()]
        t.check(f"/dev/full: {label} exits 1 with one error line", rc == 1 and len(lines) == 1 and "No space left" in lines[0],
                f"rc={rc} err={err!r}")
else:
    t.check("/dev/full exists on this machine", False)

# A reader that closes the pipe after a few bytes, while a long generation still writes.
p = subprocess.Popen([KITE, "run"] + S260 + GREEDY + ["-p", "Once", "-n", "100000", "--ctx", "100010", "--ignore-eos", "-q"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
head = p.stdout.read(16)
p.stdout.close()
err = p.stderr.read().decode(errors="replace")
p.wait(timeout=60)
t.check("closed pipe: run exits 1 (not killed by SIGPIPE) and says so", len(head) == 16 and p.returncode == 1
        and "Broken pipe" in err and err.count("error") == 1, f"rc={p.returncode} err={err!r}")
# Many ids on stdout, the reader gone before the first byte: the buffered output fails at exit.
text = b"Once upon a time there was a little girl. " * 4000
r, w = os.pipe()
os.close(r)
rc, _, err = kite(["tokenize"] + TOKENIZER, input=text, stdout=w)
os.close(w)
t.check("closed pipe: tokenize exits 1", rc == 1 and "Broken pipe" in err, f"rc={rc} err={err!r}")

# ---- the prompt from a file or stdin -----------------------------------------------------------------------
PROMPT = "Tom and his dog went to the park.\nThey played"
rc, ref, _ = run_json(S260 + GREEDY + ["-p", PROMPT, "-n", "8"])
path = os.path.join(tmp, "prompt.txt")
open(path, "w").write(PROMPT)
for label, args, stdin in (("--file", ["--file", path], None), ("-f", ["-f", path], None),
                           ("-p - (stdin)", ["-p", "-"], PROMPT.encode())):
    rc, got, err = run_json(S260 + GREEDY + args + ["-n", "8"], input=stdin)
    t.check(f"prompt from {label}: the ids of -p TEXT", ref is not None and got is not None and got["prompt_ids"] == ref["prompt_ids"]
            and got["ids"] == ref["ids"], f"rc={rc} err={err!r}")
rc, _, err = kite(["run"] + S260 + ["--file", os.path.join(tmp, "missing.txt")])
t.check("--file of a missing file: exit 1 naming it", rc == 1 and "missing.txt" in err, err)
rc, _, err = kite(["run"] + S260 + ["--file", path, "-p", "x"])
t.check("--file with --prompt: a usage error", rc == 2, err)

# ---- tokenize's trailing newline, detokenize ---------------------------------------------------------------
rc, with_echo, _ = kite(["tokenize"] + TOKENIZER, input=b"Hello world\n")
rc, bare, _ = kite(["tokenize"] + TOKENIZER, input=b"Hello world")
rc, kept, _ = kite(["tokenize"] + TOKENIZER + ["--keep-newline"], input=b"Hello world\n")
rc, as_prompt, _ = run_json(S260 + ["-p", "Hello world\n", "-n", "0"])
t.check("tokenize: echo's newline is not tokenized", with_echo == bare and len(bare.split()) >= 2, f"{with_echo!r} {bare!r}")
t.check("tokenize --keep-newline: the ids of the text with its newline",
        as_prompt is not None and [int(x) for x in kept.split()] == as_prompt["prompt_ids"] and kept != bare, f"{kept!r}")
ids = bare.decode().split()
rc, out, err = kite(["detokenize"] + TOKENIZER, input=" ".join(ids).encode())
t.check("detokenize (ids on stdin) inverts tokenize", rc == 0 and out == b"Hello world\n", repr(out))
rc, out, err = kite(["detokenize"] + TOKENIZER + ["--ids", ",".join(ids)])
t.check("detokenize --ids (commas)", rc == 0 and out == b"Hello world\n", repr(out))
rc, out, err = kite(["detokenize"] + TOKENIZER + ["--ids", "1 99999"])
t.check("detokenize: an id outside the vocabulary is a usage error naming it", rc == 2 and "99999" in err, err)
rc, out, err = kite(["detokenize"] + TOKENIZER + ["--ids", "1 x2"])
t.check("detokenize: a word that is no id is a usage error", rc == 2 and "x2" in err, err)
t.finish()
