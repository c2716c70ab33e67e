"""Diagnostic, not a test: renders the golden cases with Python's jinja2 configured as transformers'
apply_chat_template configures it (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception, strftime_now at the goldens' fixed time) and lists where @huggingface/jinja (the goldens)
and Python differ. Such cases hold kite to a quirk of the JavaScript reference.
    python3 tests/chat_golden/compare_python.py [--show N]"""
import json, os, sys
from datetime import datetime, timezone
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.dirname(os.path.abspath(__file__))
goldens = json.load(open(os.path.join(here, "goldens.json"), encoding="utf-8"))
convs = {c["name"]: c for c in json.load(open(os.path.join(here, "conversations.json"), encoding="utf-8"))["conversations"]}
fixed = datetime.fromisoformat(goldens["fixed_time_utc"].replace("Z", "+00:00")).astimezone(timezone.utc)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: fixed.strftime(f)

show = int(sys.argv[sys.argv.index("--show") + 1]) if "--show" in sys.argv else 0
compiled, same, differ = {}, 0, []
for c in goldens["cases"]:
    name = c["template"]
    if name not in compiled:
        compiled[name] = env.from_string(open(os.path.join(here, "templates", name + ".jinja"), encoding="utf-8").read())
    conv = convs[c["conversation"]]
    kw = dict(messages=conv["messages"], add_generation_prompt=c["add_generation_prompt"])
    if "tools" in conv: kw["tools"] = conv["tools"]
    kw.update(c["kwargs"])
    try:
        py, py_err = compiled[name].render(**kw), None
    except Exception as e:
        py, py_err = None, f"{type(e).__name__}: {e}"
    js, js_err = c.get("expected"), c.get("error")
    if (py is None) == (js is None) and (py is None or py == js):
        same += 1
        continue
    differ.append((c["id"], js, js_err, py, py_err))
print(f"{same} cases agree, {len(differ)} differ between @huggingface/jinja and Python jinja2 {jinja2.__version__}")
for cid, js, js_err, py, py_err in differ:
    if js is not None and py is not None:
        at = next((i for i in range(min(len(js), len(py))) if js[i] != py[i]), min(len(js), len(py)))
        what = f"text differs at {at}: js {js[max(0, at-30):at+40]!r} / py {py[max(0, at-30):at+40]!r}"
    else:
        what = f"js: {js_err or 'renders'} / py: {py_err or 'renders'}"
    print(f"  {cid}: {what}")
