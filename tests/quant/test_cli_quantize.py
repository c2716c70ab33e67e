"""kite quantize as a real process: progress on stderr, the file written and runnable by kite run, usage
errors exit 2, failures exit 1 with one line naming the problem, SIGINT leaves no file under OUT."""
import os
import signal
import subprocess
import sys
import tempfile

KITE = os.environ["KITE_BIN"]
DATA = os.environ.get("KITE_TEST_DATA", "../shared")
STORIES = os.path.join(DATA, "models", "tinystories-tok512", "stories260K.gguf")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def kite(*args, **kw):
    return subprocess.run([KITE, *args], capture_output=True, text=True, timeout=120, **kw)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "s-q4km.gguf")
    r = kite("quantize", STORIES, out, "--type", "q4_k_m", "--threads", "2")
    check(r.returncode == 0, "quantize exits 0")
    check("[   1/  48]" in r.stderr and "output.weight" in r.stderr and "-> q8_0" in r.stderr, "progress lines on stderr")
    check(r.stdout == "", "nothing on stdout")
    check(os.path.exists(out), "output written")
    r = kite("run", "-m", out, "-p", "Once upon a time", "-n", "8", "--temp", "0")
    check(r.returncode == 0 and len(r.stdout.strip()) > 0, "kite run reads the quantized file")

    r = kite("help", "quantize")
    check(r.returncode == 0 and "Q4_K_M" in r.stdout and "--imatrix" in r.stdout, "kite help quantize lists types")
    r = kite("quantize", STORIES, out)
    check(r.returncode == 2 and "--type" in r.stderr, "missing --type exits 2")
    r = kite("quantize", STORIES, out, "--type", "q4_k_m", "--threads", "zero")
    check(r.returncode == 2, "bad --threads exits 2")
    bad = os.path.join(tmp, "bad.gguf")
    r = kite("quantize", STORIES, bad, "--type", "q9_k")
    check(r.returncode == 1 and "q9_k" in r.stderr and r.stderr.count("\n") == 1, "unknown type: one line, exit 1")
    r = kite("quantize", os.path.join(tmp, "missing.gguf"), bad, "--type", "q8_0")
    check(r.returncode == 1 and "missing.gguf" in r.stderr, "missing input named")
    q8 = os.path.join(DATA, "models", "tinystories-656k", "tinystories-656k-q8_0.gguf")
    r = kite("quantize", q8, bad, "--type", "q4_0")
    check(r.returncode == 1 and "--allow-requantize" in r.stderr, "quantized source refused")
    r = kite("quantize", q8, bad, "--type", "q4_0", "--allow-requantize", "--quiet")
    check(r.returncode == 0 and r.stderr == "" and os.path.exists(bad), "--allow-requantize --quiet")

    # SIGINT while the progress lines come: cancelled, no file under OUT and no temporary left
    big = os.path.join(tmp, "tiny.gguf")
    tok = os.path.join(DATA, "models", "tinystories-tok512", "tok512.bin")
    r = kite("gen-model", "--shape", "tiny", "--type", "f32", "--tokenizer", tok, "--out", big)
    check(r.returncode == 0, "gen-model for the interrupt test")
    out2 = os.path.join(tmp, "interrupted.gguf")
    p = subprocess.Popen([KITE, "quantize", big, out2, "--type", "q2_k", "--threads", "1"], stderr=subprocess.PIPE, text=True)
    p.stderr.readline()  # the first progress line: the run is under way
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    rc = p.wait(timeout=60)
    if rc == 0:  # the run may finish before the signal lands; then the file is complete
        check(os.path.exists(out2), "a run that finished before SIGINT wrote its file")
    else:
        check(rc == 1 and "cancelled" in err, "SIGINT cancels with a message")
        check(not any(n.startswith("interrupted.gguf") for n in os.listdir(tmp)), "no file or temporary under OUT")

print(f"cli quantize: {len(failures)} failed")
sys.exit(1 if failures else 0)
