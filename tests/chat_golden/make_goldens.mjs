// Renders every template in templates/ over every conversation in conversations.json with the npm package
// @huggingface/jinja (the reference chat-template renderer of transformers.js), the way transformers'
// apply_chat_template calls a template, and writes goldens.json: one case per (template, conversation,
// add_generation_prompt, kwargs) with the expected text or the expected error. For the qwen3 and llama3
// templates it adds the token ids of the rendered text under the real tokenizers (shared/models/tokenizers),
// as apply_chat_template(tokenize=True) gives them: special-token text recognised, no BOS added.
//
//   node tests/chat_golden/make_goldens.mjs [OUT.json]     (default: tests/chat_golden/goldens.json)
//   node tests/chat_golden/make_goldens.mjs --check        (writes nothing; exit 1 if the committed goldens.json
//                                                            differs from a fresh render, naming the first case)
// Needs tests/oracle/node_modules (npm ci there) and KITE_TEST_DATA (default ../shared beside the repo).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const oracle = path.join(here, "../oracle/node_modules");
const { Template, Environment } = await import(path.join(oracle, "@huggingface/jinja/dist/index.js"));
const { TokenizerLoader } = await import(path.join(oracle, "@lenml/tokenizers/dist/main.mjs"));
const jinjaVersion = JSON.parse(fs.readFileSync(path.join(oracle, "@huggingface/jinja/package.json"), "utf8")).version;
const lenmlVersion = JSON.parse(fs.readFileSync(path.join(oracle, "@lenml/tokenizers/package.json"), "utf8")).version;

const check = process.argv.includes("--check");
const committedPath = path.join(here, "goldens.json");
const outPath = process.argv.slice(2).find((a) => !a.startsWith("--")) ?? committedPath;
const testData = process.env.KITE_TEST_DATA ?? path.join(here, "../../../shared");
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const inputs = readJson(path.join(here, "conversations.json"));

// strftime_now at a fixed instant (the kite side sets the same one), formatted as Python's strftime in the
// C locale would; the package's own strftime_now reads the clock and the host locale.
const FIXED = new Date(inputs.fixed_time_utc);
// Template.render declares the package's globals (its clock-reading strftime_now among them) and then the
// caller's variables, refusing to declare a name twice; let the caller's strftime_now replace the global.
const declare = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  if ((name === "strftime_now" && value === strftimeNow) || (name === "raise_exception" && value === raiseException))
    this.variables.delete(name);
  return declare.call(this, name, value);
};
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
  "November", "December"];
function strftimeNow(format) {
  const d = FIXED, pad = (n, w = 2) => String(n).padStart(w, "0");
  const dayOfYear = Math.floor((d - Date.UTC(d.getUTCFullYear(), 0, 1)) / 86400000) + 1;
  const map = {
    a: DAYS[d.getUTCDay()].slice(0, 3), A: DAYS[d.getUTCDay()], b: MONTHS[d.getUTCMonth()].slice(0, 3),
    B: MONTHS[d.getUTCMonth()], d: pad(d.getUTCDate()), m: pad(d.getUTCMonth() + 1), y: pad(d.getUTCFullYear() % 100),
    Y: String(d.getUTCFullYear()), H: pad(d.getUTCHours()), I: pad(((d.getUTCHours() + 11) % 12) + 1),
    M: pad(d.getUTCMinutes()), S: pad(d.getUTCSeconds()), p: d.getUTCHours() < 12 ? "AM" : "PM", j: pad(dayOfYear, 3),
    "%": "%",
  };
  return format.replace(/%(.)/g, (all, c) => {
    if (!(c in map)) throw new Error(`strftime_now: format %${c} not supported by the golden generator`);
    return map[c];
  });
}

// The chat_template_kwargs variants beyond the template's defaults, for the templates that read them,
// rendered over the conversations marked kwargs_variants.
const KWARG_VARIANTS = {
  qwen3: [{ enable_thinking: false }, { enable_thinking: true }],
  cogito: [{ enable_thinking: true }, { enable_thinking: false }],
  granite3_3: [{ thinking: true }],
};

// raise_exception as the package defines it (throw with the message), marked so that goldens tell a
// template's own refusal from a runtime error.
class TemplateRaise extends Error {}
const raiseException = (message) => { throw new TemplateRaise(message); };

// The token-id cases: templates whose tokenizer is in the test data, and whose chat_template there must be
// the same text as the committed template.
const ID_TOKENIZERS = { qwen3: "qwen3", llama3: "llama3" };
const tokenizers = {};
for (const [tplName, dir] of Object.entries(ID_TOKENIZERS)) {
  const base = path.join(testData, "models/tokenizers", dir);
  const config = readJson(path.join(base, "tokenizer_config.json"));
  const committed = fs.readFileSync(path.join(here, "templates", `${tplName}.jinja`), "utf8");
  if (config.chat_template !== committed) throw new Error(`${base}: chat_template differs from templates/${tplName}.jinja`);
  tokenizers[tplName] = TokenizerLoader.fromPreTrained({ tokenizerJSON: readJson(path.join(base, "tokenizer.json")), tokenizerConfig: config });
}
const encode = (tok, text) => Array.from(tok.encode(text, { add_special_tokens: false }));

// The JS tokenizer is an independent reference only if it agrees with known ids and with llama.cpp's own
// tokenizer test vectors for these vocabularies.
function checkTokenizer(name, vectorsBase) {
  const tok = tokenizers[name];
  const inp = fs.readFileSync(path.join(testData, "models/tokenizer-tests", vectorsBase + ".inp"), "utf8").split("\n__ggml_vocab_test__\n");
  const out = fs.readFileSync(path.join(testData, "models/tokenizer-tests", vectorsBase + ".out"), "utf8").split("\n");
  let n = 0;
  for (let i = 0; i < out.length && i < inp.length; i++) {
    if (out[i] === "" && inp[i] !== "") continue;
    const want = out[i].trim() === "" ? [] : out[i].trim().split(/\s+/).map(Number);
    const got = encode(tok, inp[i]);
    if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${name} tokenizer disagrees with llama.cpp on ${JSON.stringify(inp[i])}: ${got} vs ${want}`);
    n++;
  }
  return n;
}
const qwenKnown = encode(tokenizers.qwen3, "<|im_start|>user\nhi<|im_end|>").join(" ");
if (qwenKnown !== "151644 872 198 6023 151645") throw new Error(`qwen3 tokenizer: ${qwenKnown}`);
const vectorCounts = { qwen3: checkTokenizer("qwen3", "ggml-vocab-qwen2.gguf"), llama3: checkTokenizer("llama3", "ggml-vocab-llama-bpe.gguf") };

const names = fs.readdirSync(path.join(here, "templates")).filter((f) => f.endsWith(".jinja")).map((f) => f.slice(0, -6)).sort();
const templates = {};
const cases = [];
for (const name of names) {
  const source = fs.readFileSync(path.join(here, "templates", `${name}.jinja`), "utf8");
  const meta = readJson(path.join(here, "templates", `${name}.json`));
  templates[name] = meta;
  for (const v of KWARG_VARIANTS[name] ?? [])
    for (const k of Object.keys(v)) if (!new RegExp(`\\b${k}\\b`).test(source)) throw new Error(`${name} does not read ${k}`);
  const compiled = new Template(source);
  const special = {};
  if (meta.bos_token !== null) special.bos_token = meta.bos_token;
  if (meta.eos_token !== null) special.eos_token = meta.eos_token;
  for (const conv of inputs.conversations) {
    for (const agp of conv.generation_prompt) {
      const variants = [{}];
      if (conv.kwargs_variants) variants.push(...(KWARG_VARIANTS[name] ?? []));
      for (const extra of variants) {
        // As transformers: render(messages=, tools= (when given), documents= (when given), add_generation_prompt=,
        // **special_tokens, **chat_template_kwargs).
        const kwargs = { ...special, ...extra };
        const vars = { messages: structuredClone(conv.messages), add_generation_prompt: agp };
        if (conv.tools) vars.tools = structuredClone(conv.tools);
        Object.assign(vars, structuredClone(kwargs), { strftime_now: strftimeNow, raise_exception: raiseException });
        const c = { id: `${name}/${conv.name}/${agp ? "gen" : "nogen"}${Object.entries(extra).map(([k, v]) => `/${k}=${v}`).join("")}`,
          template: name, conversation: conv.name, add_generation_prompt: agp, kwargs };
        try {
          c.expected = compiled.render(vars);
        } catch (e) {
          c.error = String(e.message ?? e);
          c.error_kind = e instanceof TemplateRaise ? "raise_exception" : "runtime";
        }
        if (c.expected !== undefined && tokenizers[name]) {
          c.ids_tokenizer = `models/tokenizers/${ID_TOKENIZERS[name]}/tokenizer.json`;
          c.ids = encode(tokenizers[name], c.expected);
          // Special tokens whose text the messages hold: HF's ids have them there too (a forged turn),
          // kite's must not. in_content counts the occurrences in the message contents.
          const contents = conv.messages.map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? ""))).join("\u0000");
          const forged = tokenizers[name].added_tokens.filter((t) => t.special && contents.includes(t.content))
            .map((t) => ({ text: t.content, id: t.id, in_content: contents.split(t.content).length - 1 }));
          if (forged.length) c.forged = forged;
        }
        cases.push(c);
      }
    }
  }
}

const golden = {
  about: "Chat-template goldens rendered by @huggingface/jinja; made by make_goldens.mjs from templates/ and conversations.json. Do not edit by hand.",
  renderer: `@huggingface/jinja@${jinjaVersion}`,
  tokenizer: `@lenml/tokenizers@${lenmlVersion}`,
  tokenizer_checks: { known_qwen3_ids: qwenKnown, llamacpp_vectors_agreeing: vectorCounts },
  fixed_time_utc: inputs.fixed_time_utc,
  templates,
  cases,
};
const text = JSON.stringify(golden, null, 1) + "\n";
const errors = cases.filter((c) => c.error !== undefined).length;
const summary = `${cases.length} cases (${errors} expected errors, ${cases.filter((c) => c.ids).length} with ids) over ${names.length} templates`;
if (check) {
  const committed = fs.readFileSync(committedPath, "utf8");
  if (committed === text) {
    console.log(`${summary}: goldens.json is up to date`);
    process.exit(0);
  }
  const old = JSON.parse(committed);
  const oldCases = new Map((old.cases ?? []).map((c) => [c.id, JSON.stringify(c)]));
  const first = cases.find((c) => oldCases.get(c.id) !== JSON.stringify(c));
  console.error(`goldens.json differs from a fresh render by make_goldens.mjs (${summary}; committed: ${(old.cases ?? []).length} cases)` +
    (first ? `; first differing case: ${first.id}` : "; cases equal, header differs") + ". Re-run make_goldens.mjs and review the diff.");
  process.exit(1);
}
fs.writeFileSync(outPath, text);
console.log(`${summary} -> ${outPath}`);
