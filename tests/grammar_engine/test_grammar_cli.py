#!/usr/bin/env python3
"""`kite run --grammar / --json-schema / --regex / --json-object`: the printed text conforms (checked
with Python's json and re, independent of kite's matcher) and stays the same with --draft; `kite
grammar` prints GBNF that `kite run --grammar` accepts and that constrains exactly as the schema or
regex did; bad input fails with a one-line error naming the position; --help lists the options."""
import json
import os
import re
import subprocess
import sys
import tempfile

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
KITE = os.environ["KITE_BIN"]
M = os.path.join(DATA, "models", "tinystories-tok512")
MODEL = ["--model", os.path.join(M, "llama2xs-281K.bin"), "--tokenizer", os.path.join(M, "tok512.bin")]
DRAFT = os.path.join(M, "stories260K.bin")

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        print("FAIL:", msg)
        failures += 1
    return cond


def kite(*args):
    return subprocess.run([KITE, *args], capture_output=True, text=True, timeout=120)


def run_json(*args):
    r = kite("run", *MODEL, "--prompt", "Once upon a time", "--json", "--quiet", *args)
    if not check(r.returncode == 0, f"kite run {args}: exit {r.returncode}: {r.stderr.strip()}"):
        return None
    return json.loads(r.stdout)


tmp = tempfile.mkdtemp(prefix="kite-grammar-cli-")
schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "pet": {"enum": ["cat", "dog"]}},
          "required": ["name", "age", "pet"], "additionalProperties": False}
schema_path = os.path.join(tmp, "person.json")
with open(schema_path, "w") as f:
    json.dump(schema, f)
regex = r"[A-Z][a-z]{1,8} (is|was) [a-z]{1,10}\."

for seed in ("1", "2", "3"):
    for extra in ([], ["--draft", "ngram"], ["--draft", DRAFT, "--spec-budget", "4"]):
        common = ["--temperature", "1", "--seed", seed, "--max-tokens", "200", *extra]
        out = run_json("--json-schema", schema_path, *common)
        if out:
            try:
                v = json.loads(out["text"])
                check(set(v) == {"name", "age", "pet"} and isinstance(v["age"], int) and 0 <= v["age"] <= 99
                      and v["pet"] in ("cat", "dog") and len(v["name"]) <= 10, f"schema output {v}")
            except ValueError:
                check(False, f"not JSON: {out['text']!r}")
            if not extra:
                plain_schema = out["ids"]
            else:
                check(out["ids"] == plain_schema, f"--json-schema with {extra} seed {seed}: other tokens than plain")
        out = run_json("--regex", regex, *common)
        if out:
            check(re.fullmatch(regex, out["text"]) is not None, f"regex output {out['text']!r}")
        out = run_json("--json-object", *common)
        if out:
            check(out["text"].lstrip().startswith("{"), f"json-object output {out['text']!r}")

# kite grammar prints GBNF; --grammar of it gives the same tokens as the schema itself.
r = kite("grammar", "--json-schema", schema_path)
check(r.returncode == 0 and "root ::=" in r.stdout, f"kite grammar --json-schema: {r.returncode} {r.stderr}")
gbnf_path = os.path.join(tmp, "person.gbnf")
with open(gbnf_path, "w") as f:
    f.write(r.stdout)
a = run_json("--json-schema", schema_path, "--temperature", "0.8", "--seed", "9", "--max-tokens", "120")
b = run_json("--grammar", gbnf_path, "--temperature", "0.8", "--seed", "9", "--max-tokens", "120")
check(a and b and a["ids"] == b["ids"], "--grammar of kite grammar's output differs from --json-schema")
r = kite("grammar", "--regex", regex)
check(r.returncode == 0 and r.stdout.startswith("root ::="), f"kite grammar --regex: {r.stdout!r}")
r = kite("grammar", "--grammar", gbnf_path)
check(r.returncode == 0 and "root ::=" in r.stdout, "kite grammar --grammar prints the grammar back")

# Bad input: one line, the position named, exit 1; usage errors exit 2.
bad = os.path.join(tmp, "bad.gbnf")
with open(bad, "w") as f:
    f.write('root ::= "a"\nthing ::= [a-\n')
for args in (["run", *MODEL, "--prompt", "x", "--grammar", bad], ["grammar", "--grammar", bad]):
    r = kite(*args)
    check(r.returncode == 1 and "2:" in r.stderr and r.stderr.count("\n") == 1, f"bad grammar {args[0]}: {r.returncode} {r.stderr!r}")
r = kite("run", *MODEL, "--prompt", "x", "--regex", "a(b")
check(r.returncode == 1 and r.stderr.startswith("kite: error:"), f"bad regex: {r.stderr!r}")
r = kite("run", *MODEL, "--prompt", "x", "--regex", "a", "--json-object")
check(r.returncode == 2, "two constraints are a usage error")
r = kite("run", *MODEL, "--prompt", "x", "--grammar", os.path.join(tmp, "missing.gbnf"))
check(r.returncode == 1 and "missing.gbnf" in r.stderr, f"missing file: {r.stderr!r}")
r = kite("grammar")
check(r.returncode == 2, "kite grammar without a source is a usage error")
r = kite("run", "--help")
check(all(o in r.stdout for o in ("--grammar", "--json-schema", "--regex", "--json-object", "--no-forced-drafts")),
      "kite run --help lists the constraint options")
r = kite("--help")
check("grammar" in r.stdout, "kite --help lists kite grammar")

for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)
print("ok" if failures == 0 else f"{failures} failure(s)")
sys.exit(1 if failures else 0)
