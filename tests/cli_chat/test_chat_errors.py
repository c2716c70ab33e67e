#!/usr/bin/env python3
"""Bad input to kite chat gives clear errors and never a crash: usage errors (exit 2), a missing
model, a model without a chat template, a missing template file (exit 1, one line); inside a session
(the chat goes on, exit 0 at the end): unknown /commands, /save and /load without a file, /load of
bad JSON (file:line:column), of a missing file and of a file that is not a conversation, invalid
UTF-8, and a message too long for the context (with the hint to /reset)."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_chat_util import TINY, TINY_TEMPLATE, Tally, kite  # noqa: E402

t = Tally()
tmp = tempfile.mkdtemp(prefix="kite-chat-errors-")
CHAT = ["chat", "--model", TINY, "--chat-template", TINY_TEMPLATE, "--temperature", "0", "--max-tokens", "8"]


def one_line_error(label, args, status, needle, stdin=b""):
    rc, out, err = kite(args, input=stdin, timeout=120)
    lines = [l for l in err.splitlines() if l.strip()]
    ok = rc == status and len(lines) == 1 and lines[0].startswith("kite: error: ") and needle.lower() in err.lower()
    t.check(label, ok, f"rc={rc} (want {status}) stderr={err!r}")


# without --model the bundled default model is used (a note says so): it has no chat template, which is
# then the one error
rc, out, err = kite(["chat"], input=b"", timeout=120)
lines = [l for l in err.splitlines() if l.strip()]
t.check("no --model: the default model, which has no template",
        rc == 1 and len(lines) == 2 and "default model" in lines[0] and lines[1].startswith("kite: error: ")
        and "--chat-template" in lines[1] and lines[1].count("--chat-template") == 1, f"rc={rc} stderr={err!r}")
one_line_error("unknown option", CHAT + ["--frobnicate"], 2, "--frobnicate")
one_line_error("bad number", CHAT + ["--temperature", "warm"], 2, "--temperature")
one_line_error("bad --cache-type", CHAT + ["--cache-type", "q4"], 2, "--cache-type")
one_line_error("bad --kwargs", CHAT + ["--kwargs", "{nope"], 2, "--kwargs")
one_line_error("missing model", ["chat", "--model", os.path.join(tmp, "nothing.gguf")], 1, "nothing.gguf")
one_line_error("model without a chat template", ["chat", "--model", TINY], 1, "template")
one_line_error("missing template file", ["chat", "--model", TINY, "--chat-template", os.path.join(tmp, "none.jinja")], 1, "none.jinja")
broken = os.path.join(tmp, "broken.jinja")
open(broken, "w").write("{% for m in messages %}\n{{ m.content }\n{% endfor %}\n")
one_line_error("template syntax error names the file and line", ["chat", "--model", TINY, "--chat-template", broken], 1, "broken.jinja")

bad_json = os.path.join(tmp, "bad.json")
open(bad_json, "w").write('{"messages": [\n  {"role": "user", "content": "hi"}\n  {"role": "assistant"}\n]}\n')
not_conv = os.path.join(tmp, "notconv.json")
json.dump({"messages": [{"role": "user", "content": 42}]}, open(not_conv, "w"))
session = b"\n".join([
    b"/frobnicate",
    b"/save",
    b"/load",
    b"/stats extra",
    f"/load {bad_json}".encode(),
    f"/load {os.path.join(tmp, 'missing.json')}".encode(),
    f"/load {not_conv}".encode(),
    b"caf\xe9 latin-1 is not UTF-8",
    b"once upon a time " * 200,
    b"/stats",
    b"Hello there.",
    b"/stats",
    b"",
])
rc, out, err = kite(CHAT + ["--ctx", "256"], input=session, timeout=120)
stdout = out.decode("utf-8", errors="replace")
t.check("the session ends normally", rc == 0, f"rc={rc} {err}")
errors = [l for l in err.splitlines() if l.strip()]
expected = [
    ("unknown command", r"unknown command /frobnicate"),
    ("/save without a file", r"/save needs a file name"),
    ("/load without a file", r"/load needs a file name"),
    ("a command with a stray argument", r"/stats takes no argument"),
    ("/load of bad JSON names file:line:column", re.escape(bad_json) + r":3:\d+: invalid JSON"),
    ("/load of a missing file", r"missing\.json"),
    ("/load of something that is not a conversation", re.escape(not_conv) + r".*content"),
    ("invalid UTF-8 input", r"not valid UTF-8"),
    ("a message longer than the context", r"context holds 256.*/reset"),
]
for i, (label, pattern) in enumerate(expected):
    line = errors[i] if i < len(errors) else ""
    t.check(label, line.startswith("kite: error: ") and re.search(pattern, line) is not None, line or err)
t.check("nothing else on stderr", len(errors) == len(expected), errors[len(expected):])
stats = re.findall(r"context: (\d+) of 256 tokens\nlast turn: (none yet|prefilled (\d+))", stdout)
t.check("the refused messages left the context empty", len(stats) == 2 and stats[0][0] == "0" and stats[0][1] == "none yet", stats)
t.check("and the chat still answers", len(stats) == 2 and int(stats[1][0]) > 0 and stats[1][2] != "", stats)
t.finish()
