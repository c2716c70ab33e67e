"""`kite route` as a process: explain prints the decision for each policy of the issue's example config
(length, segment, latency budget, confidence gate, explicit route, a 400), with the remote unreachable
at start (a warning naming backends.cloud.url, then local fallbacks); calibrate on MT-Bench prompts with
stories260K; usage and config errors, and the API key in no output."""
import json
import os
import subprocess
import sys
import tempfile

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
MODEL = os.path.join(DATA, "models", "tinystories-tok512", "stories260K.gguf")
MT_BENCH = os.path.join(DATA, "data", "mt_bench", "question.jsonl")
SECRET = "sk-cli-test-SECRET-4242"

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def kite(args, stdin=None, env_extra=None):
    env = dict(os.environ, CLOUD_API_KEY=SECRET, KITE_LOG="warn")
    env.update(env_extra or {})
    p = subprocess.run([KITE] + args, input=stdin, capture_output=True, timeout=300, env=env)
    out, err = p.stdout.decode(), p.stderr.decode()
    check(SECRET not in out and SECRET not in err, "no API key in the output of kite " + " ".join(args[:2]))
    return p.returncode, out, err


def config(tmp, rules_local_ctx=None):
    local = {"model": MODEL}
    if rules_local_ctx:
        local["ctx"] = rules_local_ctx
    cfg = {"backends": {
        "local": local,
        # port 1: nothing listens there, connections are refused at once
        "cloud": {"url": "http://127.0.0.1:1/v1", "model": "big", "api_key_env": "CLOUD_API_KEY",
                  "timeout_ms": {"connect": 2000, "first_token": 10000, "total": 120000}, "max_context": 4096}},
        "rules": [
            {"when": {"prompt_tokens_over": 1500}, "use": "cloud"},
            {"when": {"segment": ["pro"]}, "use": "cloud"},
            {"when": {"max_latency_ms_under": 300}, "use": "fastest"},
            {"confidence": {"first_tokens": 8, "quantile": 0.1, "min_logprob": -3.0}, "else": "cloud"},
            {"use": "local", "fallback": "cloud"}]}
    path = os.path.join(tmp, "router.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def explain(cfg, body, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
        req = f.name
    try:
        rc, out, err = kite(["route", "explain", cfg, "--request", req] + list(extra))
    finally:
        os.unlink(req)
    check(rc == 0, "explain exits 0 (%s)" % err.strip()[:200])
    check("backends.cloud.url is unreachable at start" in err, "the unreachable remote is a warning naming its field")
    return json.loads(out) if rc == 0 else {}


def main():
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(tmp)
        msg = [{"role": "user", "content": "Once upon a time"}]
        d = explain(cfg, {"messages": msg, "max_tokens": 16})
        check(d.get("backend") == "local" and d.get("rule") == 3 and d.get("attempts") == ["local"]
              and d.get("confidence") is None, "no condition: rule 3, local only")
        # the remote is in cooldown (its probe failed): the gate has no else, local answers without it
        check(d.get("reason") == "rule 3: confidence gate: cloud is in cooldown, answering from local without the gate",
              "the gate's else in cooldown: %s" % d.get("reason"))
        d = explain(cfg, {"messages": msg}, "--segment", "pro")
        check(d.get("rule") == 1 and d.get("reason") == "rule 1: segment pro; cloud is in cooldown, falling back to local",
              "segment rule with the remote down falls back: %s" % d.get("reason"))
        d = explain(cfg, {"prompt": "Once upon a time", "max_tokens": 4, "max_latency_ms": 250})
        check(d.get("rule") == 2 and d.get("reason", "").startswith("rule 2: budget 250 ms: local "),
              "latency budget rule: %s" % d.get("reason"))
        check(d.get("predicted_ms", {}).get("cloud") == 10000 + 4 * 50, "an unobserved remote predicted from its timeouts")
        d = explain(cfg, {"prompt": "dog " * 850})  # about 1700 tokens: local fits it (2048)
        check(d.get("rule") == 0 and d.get("reason", "").startswith("rule 0: prompt ")
              and "> 1500; cloud is in cooldown, falling back to local" in d.get("reason", ""),
              "length rule: %s" % d.get("reason"))
        check(d.get("request", {}).get("prompt_tokens", 0) > 1500, "prompt tokens counted with the local tokenizer")
        d = explain(cfg, {"prompt": "x", "route": "local"})
        check(d.get("rule") is None and d.get("reason") == "explicit: route=local", "explicit route")
        d = explain(cfg, {"prompt": "dog " * 4500})  # more than cloud's 4096 and local's 2048
        check(d.get("http_status") == 400 and "fits no backend: local ctx 2048, cloud max_context 4096" in d.get("reason", ""),
              "fits no backend: 400: %s" % d.get("reason"))

        # stdin as the request
        rc, out, err = kite(["route", "explain", cfg, "--request", "-", "--no-measure"], stdin=b'{"prompt": "hi"}')
        check(rc == 0 and json.loads(out)["backend"] == "local", "explain reads the request from stdin")

        # calibrate: MT-Bench's first turns, thresholds for two fractions
        rc, out, err = kite(["route", "calibrate", cfg, "--prompts", MT_BENCH, "--limit", "20", "--remote-fraction", "0.25",
                             "--remote-fraction", "0.5", "--json"])
        check(rc == 0, "calibrate exits 0 (%s)" % err.strip()[:200])
        if rc == 0:
            c = json.loads(out)
            scores = c["scores"]
            check(c["prompts"] == 20 and len(scores) == 20, "20 prompts scored")
            check(all(s <= 0 for s in scores), "scores are log-probabilities")
            for t, frac in zip(c["thresholds"], (0.25, 0.5)):
                below = sum(1 for s in scores if s < t["min_logprob"])
                # numpy linear quantile: h = 19 * frac; floor(h) + 1 values lie at or below the lower neighbour
                want = int(19 * frac) + 1 if 19 * frac != int(19 * frac) else int(19 * frac)
                check(below == t["below"] and below == want, "fraction %g: %d of 20 below (want %d)" % (frac, below, want))
        rc, out, err = kite(["route", "calibrate", cfg, "--prompts", MT_BENCH, "--limit", "5", "--remote-fraction", "0.4"])
        check(rc == 0 and "remote_fraction 0.400: min_logprob" in out and '"else": "cloud"' in out,
              "calibrate prints a ready-to-paste rule")
        rule_line = [l for l in out.splitlines() if l.strip().startswith('{"confidence"')]
        check(len(rule_line) == 1 and "min_logprob" in json.loads(rule_line[0])["confidence"], "the printed rule is JSON")

        # errors
        rc, out, err = kite(["route", "explain", cfg])
        check(rc == 2 and "--request" in err, "explain without --request: usage error")
        rc, out, err = kite(["route", "frobnicate", cfg])
        check(rc == 2 and "unknown kite route command" in err, "unknown verb")
        rc, out, err = kite(["route", "calibrate", cfg, "--prompts", MT_BENCH, "--quantile", "2"])
        check(rc == 2 and "--quantile" in err, "quantile out of range")
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"backends": {"cloud": {"url": "http://h", "api_key_env": "NOT_SET_ANYWHERE_42"}}}, f)
        rc, out, err = kite(["route", "explain", bad, "--request", "-"], stdin=b"{}")
        check(rc == 1 and "backends.cloud.api_key_env" in err and "NOT_SET_ANYWHERE_42" in err, "unset key variable named")
        with open(bad, "w") as f:
            f.write('{"backends": {"cloud": {"url": "http://h", "api_key": "%s"}}}' % SECRET)
        rc, out, err = kite(["route", "explain", bad, "--request", "-"], stdin=b"{}")
        check(rc == 1 and 'backends.cloud: unknown key "api_key"' in err, "a key pasted into the config is not echoed")
        rc, out, err = kite(["route", "--help"])
        check(rc == 0 and "kite route explain" in out, "--help")
        rc, out, err = kite(["--help"])
        check(rc == 0 and "route" in out, "kite --help lists route")
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("all passed")


main()
