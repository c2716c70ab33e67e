#!/usr/bin/env python3
"""kite chat with piped input on a real model (TinyStories-656K with a ChatML-like template): a
two-turn conversation whose second turn prefills only its new tokens, /stats, /save and /load
round trip, /reset (keeping --system), and reasoning shown apart with a thinking template.

References computed independently of kite chat: the first answer and its token ids come from
kite run --chat (the same greedy turn); the second turn's tokens are those of the conversation
rendered by @huggingface/jinja and tokenized by kite tokenize; what the session can reuse is their
common prefix with the first turn's prompt and answer ids."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_chat_util import (THINK_TEMPLATE, TINY, TINY_TEMPLATE, Tally, common_prefix, jinja_render,  # noqa: E402
                           kite, special_tokens, tokenize)

t = Tally()
tmp = tempfile.mkdtemp(prefix="kite-chat-")
SPECIALS = special_tokens(os.path.join(TINY, "tokenizer_config.json"))
TEMPLATE = open(TINY_TEMPLATE, encoding="utf-8").read()
MODEL = ["--model", TINY]
SAMPLING = ["--temperature", "0", "--max-tokens", "24"]
SYSTEM = "You are a storyteller."
U1, U2, U3 = "Tell me about a dog named Max.", "What did Max do next?", "Where did they go?"
STATS = re.compile(r"context: (\d+) of (\d+) tokens\nlast turn: prefilled (\d+) tokens, reused (\d+) from the cache, "
                   r"generated (\d+) tokens\nspeed: prefill [\d.]+ tok/s, decode [\d.]+ tok/s, time to first token [\d.]+ ms\n")


def render_ids(messages, gen=True, template=TEMPLATE, **kwargs):
    text = jinja_render(template, dict(SPECIALS, messages=messages, add_generation_prompt=gen, **kwargs))
    return tokenize(MODEL, text)


# The first turn, answered by kite run --chat.
rc, out, err = kite(["run", "--chat", "--chat-template", TINY_TEMPLATE, "--system", SYSTEM, "--prompt", U1, "--json",
                     "--quiet"] + MODEL + SAMPLING)
assert rc == 0, err
first = json.loads(out)
P1, G1, A1 = first["prompt_ids"], first["ids"], first["text"]
# The reference below tokenizes a rendering; text spelling a special token would be read as one there.
assert "<|" not in A1, f"pick another prompt: the greedy answer spells a special token: {A1!r}"

f1, f2, f3, f4 = (os.path.join(tmp, f"conv{i}.json") for i in range(1, 5))
script = "\n".join([U1, "/stats", U2, "/stats", f"/save {f1}", "/reset", "/stats", f"/save {f2}", f"/load {f1}",
                    f"/save {f3}", U3, "/stats", f"/save {f4}", ""])
rc, out, err = kite(["chat", "--chat-template", TINY_TEMPLATE, "--system", SYSTEM] + MODEL + SAMPLING, input=script.encode())
stdout = out.decode("utf-8", errors="replace")
t.check("chat exits 0 at the end of input", rc == 0, err)
t.check("nothing on stderr", err.strip() == "", err)
stats = STATS.findall(stdout)
t.check("three /stats reports after turns, one before any", len(stats) == 3 and "last turn: none yet" in stdout, stdout)
if len(stats) < 3:
    t.finish()
(ctx1, nctx, pre1, reuse1, gen1), (ctx2, _, pre2, reuse2, gen2), (ctx3, _, pre3, reuse3, gen3) = [tuple(map(int, s)) for s in stats]

t.check("the first answer is kite run --chat's", stdout.startswith(A1 + ("\n" if A1 else "") + "context: "), (stdout[:200], A1))
t.check("turn 1 prefilled the whole prompt", (pre1, reuse1) == (len(P1), 0), (pre1, reuse1, len(P1)))
t.check("turn 1 generated what kite run did", gen1 == len(G1) and ctx1 == len(P1) + len(G1), (gen1, ctx1, len(G1)))

saved = json.load(open(f1, encoding="utf-8"))
msgs = saved.get("messages", [])
t.check("/save: the conversation in OpenAI form",
        [m.get("role") for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
        and msgs[0]["content"] == SYSTEM and msgs[1]["content"] == U1 and msgs[2]["content"] == A1 and msgs[3]["content"] == U2,
        msgs)
A2 = msgs[4]["content"] if len(msgs) == 5 else ""
T2 = render_ids(msgs[:4])
reusable = min(common_prefix(T2, P1 + G1), len(T2) - 1)
t.check("turn 2 prefilled only its new tokens", pre2 == len(T2) - reusable and reuse2 == reusable,
        f"prefilled {pre2} reused {reuse2}; expected {len(T2) - reusable} and {reusable} of {len(T2)}")
t.check("turn 2 reused the whole first prompt", reuse2 >= len(P1), (reuse2, len(P1)))
# The answer's ids are those its text tokenizes to, so the whole first exchange stays in the cache and
# the second turn costs exactly the tokens that follow it.
t.check("turn 2 reused the whole first exchange (prompt and answer)", reuse2 == len(P1) + len(G1), (reuse2, len(P1), len(G1)))
t.check("turn 2's prefill = the new turn's token count", pre2 == len(T2) - len(P1) - len(G1), (pre2, len(T2), len(P1), len(G1)))
t.check("turn 2's context", ctx2 == len(T2) + gen2, (ctx2, len(T2), gen2))

# Speculative decoding changes the speed, never the answers.
rc, out_draft, err = kite(["chat", "--chat-template", TINY_TEMPLATE, "--system", SYSTEM, "--draft", "ngram"] + MODEL + SAMPLING,
                          input="\n".join([U1, U2, ""]).encode())
answers = "\n".join(m["content"] for m in msgs[2::2]) + "\n"
t.check("--draft ngram gives the same answers", rc == 0 and out_draft.decode("utf-8", errors="replace") == answers,
        (out_draft, answers, err))

t.check("/reset empties the context", "new conversation\ncontext: 0 of" in stdout, stdout)
kept = json.load(open(f2, encoding="utf-8"))
t.check("/reset keeps the --system message", kept == {"messages": [{"role": "system", "content": SYSTEM}]}, kept)
t.check("/load then /save gives the same messages", json.load(open(f3, encoding="utf-8")) == saved)
T3 = render_ids(msgs + [{"role": "user", "content": U3}])
t.check("after /reset and /load the next turn prefills everything", (pre3, reuse3) == (len(T3), 0), (pre3, reuse3, len(T3)))
final = json.load(open(f4, encoding="utf-8"))["messages"]
t.check("the loaded conversation goes on", final[:5] == msgs and [m["role"] for m in final[5:]] == ["user", "assistant"], final)

# Reasoning: a template whose generation prompt opens <think> makes the answer a thought: shown with
# a "| " prefix (no colours in a pipe) and stored as reasoning_content, not content. With --no-think
# (enable_thinking=false) the template writes an empty thought and the answer is content.
think_template = open(THINK_TEMPLATE, encoding="utf-8").read()
for no_think in (False, True):
    kw = {"enable_thinking": False} if no_think else {}
    ids = render_ids([{"role": "user", "content": U1}], template=think_template, **kw)
    rc, out, err = kite(["run", "--prompt-ids", ",".join(map(str, ids)), "--json", "--quiet"] + MODEL + SAMPLING)
    want = json.loads(out)["text"]
    f5 = os.path.join(tmp, f"think{int(no_think)}.json")
    rc, out, err = kite(["chat", "--chat-template", THINK_TEMPLATE] + (["--no-think"] if no_think else []) + MODEL + SAMPLING,
                        input=f"{U1}\n/stats\n/save {f5}\n".encode())
    shown = out.decode("utf-8", errors="replace").split("context: ")[0]
    reply = json.load(open(f5, encoding="utf-8"))["messages"][-1] if rc == 0 and os.path.exists(f5) else {}
    m = STATS.search(out.decode("utf-8", errors="replace"))
    t.check(f"thinking template (no_think={no_think}): prompt of {len(ids)} tokens", m is not None and int(m.group(3)) == len(ids),
            out[:300])
    if no_think:
        t.check("--no-think: the answer is content", reply.get("content") == want and "reasoning_content" not in reply
                and shown == want + "\n", (reply, want, shown))
    else:
        thought = want.lstrip("\r\n").rstrip("\r\n")
        lines = shown.rstrip("\n").split("\n")
        t.check("thinking: stored as reasoning_content", reply.get("reasoning_content") == thought and reply.get("content") == "",
                (reply, thought))
        t.check("thinking: shown prefixed, no colours in a pipe", all(l.startswith("| ") for l in lines) and "\x1b" not in shown
                and "\n".join(l[2:] for l in lines).rstrip("\r\n ") == thought.rstrip(" "), (shown, want))
t.finish()
