#!/usr/bin/env python3
"""Bad input never crashes kite: truncated or corrupted model files, wrong magic, absurd sizes, a
missing tokenizer, a prompt longer than the context, invalid UTF-8. Each gives a clear one-line
error on stderr and a non-zero exit status, within a time limit."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
M = os.path.join(DATA, "models")
STORIES_BIN = os.path.join(M, "tinystories-tok512", "stories260K.bin")
STORIES_GGUF = os.path.join(M, "tinystories-tok512", "stories260K.gguf")
TOK512 = os.path.join(M, "tinystories-tok512", "tok512.bin")
HF_DIR = os.path.join(M, "tinystories-656k")

results = {"passed": 0, "failed": 0}

def expect_error(name, args, needle=None, stdin=None):
    try:
        p = subprocess.run([KITE] + args, capture_output=True, timeout=60, input=stdin)
    except subprocess.TimeoutExpired:
        print(f"FAIL {name}: hang (over 60 s)")
        results["failed"] += 1
        return
    err = p.stderr.decode("utf-8", errors="replace").strip()
    lines = [l for l in err.splitlines() if l.strip()]
    problems = []
    if p.returncode <= 0 or p.returncode >= 128:
        problems.append(f"exit status {p.returncode} (a crash is negative or >= 128)")
    if len(lines) != 1 or not lines[0].startswith("kite: error: "):
        problems.append(f"stderr is not one 'kite: error:' line: {err!r}")
    if needle and needle.lower() not in err.lower():
        problems.append(f"message lacks {needle!r}: {err!r}")
    if problems:
        print(f"FAIL {name}: " + "; ".join(problems))
        results["failed"] += 1
    else:
        print(f"ok   {name}: {lines[0]}")
        results["passed"] += 1

def run_model(path, extra=()):
    return ["run", "--model", path, "--prompt", "Once", "--max-tokens", "4", "--quiet"] + list(extra)

def main():
    tmp = tempfile.mkdtemp(prefix="kite-bad-")
    try:
        gguf = open(STORIES_GGUF, "rb").read()
        binf = open(STORIES_BIN, "rb").read()
        st = open(os.path.join(HF_DIR, "model.safetensors"), "rb").read()

        def write(name, data):
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            return path

        # GGUF: truncations at many points, wrong magic, absurd counts and sizes.
        for cut in (0, 3, 4, 8, 16, 24, 100, 1000, len(gguf) // 2, len(gguf) - 1):
            expect_error(f"gguf truncated at {cut}", run_model(write(f"t{cut}.gguf", gguf[:cut])))
        expect_error("gguf wrong magic", run_model(write("magic.gguf", b"GGUX" + gguf[4:]), ["--tokenizer", TOK512]))
        expect_error("gguf version 99", run_model(write("v99.gguf", gguf[:4] + struct.pack("<I", 99) + gguf[8:])), "version")
        expect_error("gguf absurd tensor count", run_model(write("nt.gguf", gguf[:8] + struct.pack("<Q", 1 << 60) + gguf[16:])))
        expect_error("gguf absurd kv count", run_model(write("nkv.gguf", gguf[:16] + struct.pack("<Q", 1 << 60) + gguf[24:])))
        # Flip bytes through the header region: each must load cleanly or fail cleanly, never crash.
        crashes = 0
        for off in range(24, min(len(gguf), 6000), 97):
            bad = bytearray(gguf)
            bad[off] ^= 0xFF
            path = write("flip.gguf", bytes(bad))
            p = subprocess.run([KITE] + run_model(path), capture_output=True, timeout=60)
            if p.returncode < 0 or p.returncode >= 128:
                crashes += 1
                print(f"FAIL gguf byte flip at {off}: exit {p.returncode}")
        results["passed" if crashes == 0 else "failed"] += 1

        # llama2.c .bin: truncated, absurd header.
        for cut in (0, 10, 28, 1000, len(binf) // 2, len(binf) - 4):
            expect_error(f"llama2c truncated at {cut}", run_model(write(f"t{cut}.bin", binf[:cut]), ["--tokenizer", TOK512]))
        absurd = struct.pack("<7i", 1 << 30, 1 << 30, 1000, 8, 4, 512, 256) + binf[28:]
        expect_error("llama2c absurd dims", run_model(write("absurd.bin", absurd), ["--tokenizer", TOK512]))
        negative = struct.pack("<7i", -64, 172, 5, 8, 4, 512, 512) + binf[28:]
        expect_error("llama2c negative dim", run_model(write("neg.bin", negative), ["--tokenizer", TOK512]))
        expect_error("llama2c without tokenizer", run_model(STORIES_BIN), "tokenizer")
        expect_error("bad tokenizer file", run_model(STORIES_BIN, ["--tokenizer", write("tok.bin", b"\x01\x02")]))
        expect_error("missing model", run_model(os.path.join(tmp, "nope.gguf")), "nope.gguf")

        # safetensors folder: truncated weights, absurd header length, missing config.
        for cut in (0, 7, 8, 100, len(st) // 2, len(st) - 1):
            d = os.path.join(tmp, f"hf{cut}")
            os.mkdir(d)
            for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(HF_DIR, f), d)
            write(f"hf{cut}/model.safetensors", st[:cut])
            expect_error(f"safetensors truncated at {cut}", run_model(d))
        d = os.path.join(tmp, "hfhuge")
        os.mkdir(d)
        for f in ("config.json", "tokenizer.json"):
            shutil.copy(os.path.join(HF_DIR, f), d)
        write("hfhuge/model.safetensors", struct.pack("<Q", 1 << 62) + st[8:])
        expect_error("safetensors absurd header length", run_model(d))
        d = os.path.join(tmp, "hfnoconfig")
        os.mkdir(d)
        shutil.copy(os.path.join(HF_DIR, "model.safetensors"), d)
        expect_error("hf folder without config.json", run_model(d), "config.json")

        # Prompts: longer than the context, invalid UTF-8.
        expect_error("prompt longer than context",
                     ["run", "--model", STORIES_GGUF, "--ctx", "8", "--prompt", "Once upon a time there was a big dog", "--quiet"],
                     "context")
        p_bad = subprocess.run([KITE.encode(), b"run", b"--model", STORIES_GGUF.encode(), b"--prompt", b"abc\xff\xfe", b"--quiet"],
                               capture_output=True, timeout=60)
        ok = 0 < p_bad.returncode < 128 and b"UTF-8" in p_bad.stderr and len(p_bad.stderr.strip().splitlines()) == 1
        print(("ok  " if ok else "FAIL") + f" invalid UTF-8 prompt: {p_bad.stderr.decode(errors='replace').strip()}")
        results["passed" if ok else "failed"] += 1
        expect_error("tokenize invalid UTF-8", ["tokenize", "--model", STORIES_GGUF], "UTF-8", stdin=b"\xc3\x28")
        # Bad options.
        expect_error("unknown option", ["run", "--model", STORIES_GGUF, "--bogus", "1"])
        expect_error("bad number", ["run", "--model", STORIES_GGUF, "--prompt", "x", "--top-k", "many"])
        expect_error("top-p out of range", ["run", "--model", STORIES_GGUF, "--prompt", "x", "--top-p", "1.5", "--quiet"], "top_p")
        expect_error("bad --cache-type", ["run", "--model", STORIES_GGUF, "--prompt", "x", "--cache-type", "f8"], "cache-type")
        # The library's warnings reach stderr (KITE_LOG, default warn; off silences them) and the run goes on.
        for log, want_warning in ((None, True), ("off", False)):
            env = dict(os.environ, KITE_CPU="bogus")
            env.pop("KITE_LOG", None)
            if log:
                env["KITE_LOG"] = log
            p_warn = subprocess.run([KITE, "run", "--model", STORIES_GGUF, "--prompt", "Hi", "--max-tokens", "2", "--quiet"],
                                    capture_output=True, timeout=60, env=env)
            err = p_warn.stderr.decode(errors="replace")
            ok = p_warn.returncode == 0 and ("kite: warning: KITE_CPU=bogus" in err) == want_warning
            print(("ok  " if ok else "FAIL") + f" KITE_CPU=bogus with KITE_LOG={log}: exit {p_warn.returncode}, stderr {err.strip()!r}")
            results["passed" if ok else "failed"] += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0

if __name__ == "__main__":
    sys.exit(main())
