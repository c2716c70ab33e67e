#!/usr/bin/env python3
"""kite chat on a terminal (a pty, as a person runs it): Ctrl-C while an answer streams stops that
answer and returns to the prompt, keeping the part written in the conversation; the chat goes on
(another turn reuses the cache, commands work); Ctrl-C on a typed line drops the line; Ctrl-C at an
empty prompt leaves with status 0. The answers are long (--ignore-eos, a large context) so that the
interrupt lands mid-stream."""
import json
import os
import pty
import re
import select
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_chat_util import KITE, TINY, TINY_TEMPLATE, Tally  # noqa: E402

t = Tally()
tmp = tempfile.mkdtemp(prefix="kite-chat-pty-")
saved = os.path.join(tmp, "partial.json")
pid, fd = pty.fork()
if pid == 0:
    os.execv(KITE, [KITE, "chat", "--model", TINY, "--chat-template", TINY_TEMPLATE, "--ignore-eos", "--ctx", "60000",
                    "--max-tokens", "50000", "--temperature", "0.8", "--seed", "7"])

output = b""


def read_until(pattern, timeout=60.0, start=0):
    """Reads the pty until pattern (a regex on bytes) matches output[start:]; returns the match or None."""
    global output
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, output[start:])
        if m:
            return m
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return None
            if not data:
                return None
            output += data
    return re.search(pattern, output[start:])


def wait_for_line_editing(timeout=10.0):
    """libedit prints the prompt, then puts the terminal in raw mode: text typed in between is echoed by
    the kernel and a Ctrl-C flushes it, as on any terminal. A person cannot type within that
    millisecond; the test waits for raw mode (no ECHO) instead."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not termios.tcgetattr(fd)[3] & termios.ECHO:
            return True
        time.sleep(0.002)
    return False


def send(data):
    os.write(fd, data)


def interrupt_answer(message):
    """Sends a message, waits until its answer has streamed a while, sends Ctrl-C; True when the answer
    stops with the notice and the prompt comes back."""
    mark = len(output)
    send(message + b"\r")
    echo = read_until(re.escape(message) + rb"\r?\n", 30, mark)
    if not echo:
        return False
    streaming_from = mark + echo.end()
    # Some answer text first (at least 200 bytes), then the interrupt.
    if not read_until(rb"[\s\S]{200}", 60, streaming_from):
        return False
    send(b"\x03")
    return read_until(rb"answer stopped[^\n]*\n(\r)?> ", 60, streaming_from) is not None


t.check("the prompt appears", read_until(rb"> ", 60) is not None, output[-300:])
t.check("Ctrl-C stops the first answer and the prompt returns", interrupt_answer(b"Tell me a long story."), output[-500:])
mark = len(output)
send(b"/stats\r")
m = read_until(rb"context: (\d+) of \d+ tokens\r?\nlast turn: prefilled (\d+) tokens, reused (\d+) from the cache, generated (\d+) tokens", 30, mark)
stats1 = tuple(int(x) for x in m.groups()) if m else None
t.check("/stats after the interrupt: a partial answer", stats1 is not None and 0 < stats1[3] < 50000, output[mark:])
send(f"/save {saved}\r".encode())
read_until(rb"saved \d+ messages", 30, mark)
try:
    msgs = json.load(open(saved, encoding="utf-8"))["messages"]
except (OSError, ValueError, KeyError) as e:
    msgs = [str(e)]
t.check("the partial answer stays in the conversation",
        len(msgs) == 2 and msgs[1].get("role") == "assistant" and len(msgs[1].get("content", "")) > 0, msgs)

# The chat goes on: a second turn reuses what the first left in the cache, and can be stopped too.
SECOND = "And then? Un café ☕"  # typed UTF-8 goes through line editing intact
t.check("a second answer streams and stops on Ctrl-C", interrupt_answer(SECOND.encode()), output[-500:])
mark = len(output)
send(b"/stats\r")
m = read_until(rb"context: (\d+) of \d+ tokens\r?\nlast turn: prefilled (\d+) tokens, reused (\d+) from the cache, generated (\d+) tokens", 30, mark)
stats2 = tuple(int(x) for x in m.groups()) if m else None
# (How much of the partial answer is reused depends on whether the sampled tokens are the ones its
# text tokenizes to; test_chat_session checks the exact count on a greedy answer.)
t.check("the second turn reused at least the first prompt",
        stats1 is not None and stats2 is not None and stats2[2] >= stats1[1] and stats2[1] > 0, (stats1, stats2))

send(f"/save {saved}\r".encode())
read_until(rb"saved 4 messages[^\r\n]*\r?\n> ", 30, mark)
try:
    msgs = json.load(open(saved, encoding="utf-8"))["messages"]
except (OSError, ValueError, KeyError) as e:
    msgs = [str(e)]
t.check("typed UTF-8 text is kept", len(msgs) == 4 and msgs[2].get("content") == SECOND, msgs[2:3])

# Ctrl-C on a typed line drops the line, and the chat stays.
mark = len(output)
wait_for_line_editing()
send(b"this line is dropped")
read_until(rb"dropped", 10, mark)
send(b"\x03")
time.sleep(0.5)
send(b"/help\r")
t.check("Ctrl-C on a typed line drops it; the chat stays", read_until(rb"/reset", 30, mark) is not None, output[mark:])
read_until(rb"> $", 10, mark)

# Ctrl-C at an empty prompt leaves, with status 0.
send(b"\x03")
deadline = time.time() + 30
status = None
while time.time() < deadline:
    read_until(rb"$^", 0.2)  # drain
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = st
        break
if status is None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
t.check("Ctrl-C at an empty prompt exits 0", status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
        (status, output[-300:]))
t.finish()
