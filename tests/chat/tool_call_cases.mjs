// The reference for the tool-call parsers: what each real chat template writes for an assistant message
// with OpenAI tool_calls, rendered by @huggingface/jinja (the renderer kite's interpreter follows), and
// the calls that message held. Writes tests/chat/tool_call_cases.json; test_tool_calls.c parses every
// output and must get the same calls back (names, arguments as JSON values), content and reasoning.
//
// The assistant turn is the text the template adds for the message: render(messages + assistant,
// add_generation_prompt=false) minus render(messages, add_generation_prompt=true), cut at the template's
// end-of-turn token (the model's stop token, which the engine does not hand to the parser).
// Templates: the tool-capable ones of tests/chat_golden/templates, plus GGUF templates shipped by
// @huggingface/ollama-utils (Llama 3.1 with its built-in tools, DeepSeek-R1 and V3.1, QwQ) read from
// its dist/index.mjs. gpt-oss (harmony) and Mistral's [ARGS] form have no template in either package:
// test_tool_calls.c covers them with texts written from their published format descriptions.
//
// Usage: node tool_call_cases.mjs [--check]   (--check: fail if the committed file differs)
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "../oracle/node_modules");
const { Template } = await import(join(modules, "@huggingface/jinja/dist/index.js"));
const jinjaVersion = JSON.parse(readFileSync(join(modules, "@huggingface/jinja/package.json"), "utf8")).version;
const ollamaVersion = JSON.parse(readFileSync(join(modules, "@huggingface/ollama-utils/package.json"), "utf8")).version;

// The family each template's model writes (the test checks kite_tool_detect agrees) and whether it thinks.
const GOLDEN = {
  qwen2_5: { format: "hermes", think: false },
  qwen3: { format: "hermes", think: true },
  cogito: { format: "hermes", think: false }, // thinks, but its template shows no <think>
  llama3_2: { format: "llama3", think: false },
  mistral_nemo: { format: "mistral", think: false },
  deepseek_v3: { format: "deepseek", think: false },
  deepseek_r1: { format: "deepseek", think: true },
};
const OLLAMA = {
  "library/llama3.1:8b": { name: "llama3_1", format: "llama3", think: false },
  "library/deepseek-r1:latest": { name: "deepseek_r1_0528", format: "deepseek", think: true },
  "library/deepseek-v3.1:latest": { name: "deepseek_v3_1", format: "deepseek_v3_1", think: true },
  "library/qwq:32b": { name: "qwq", format: "hermes", think: false },
};
const SPECIAL = {
  qwen2_5: {}, qwen3: {}, cogito: {}, qwq: {},
  llama3_2: { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
  llama3_1: { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
  mistral_nemo: { bos_token: "<s>", eos_token: "</s>" },
  deepseek_v3: { bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>" },
  deepseek_r1: { bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>" },
  deepseek_r1_0528: { bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>" },
  deepseek_v3_1: { bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>" },
};
const END_OF_TURN = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<｜end▁of▁sentence｜>", "<|end_of_text|>"];

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city.",
    parameters: { type: "object", properties: { location: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } }, required: ["location"] } } },
  { type: "function", function: { name: "get_time", description: "Local time.", parameters: { type: "object", properties: { timezone: { type: "string" } } } } },
  { type: "function", function: { name: "search", description: "Search.", parameters: { type: "object" } } },
];

// Each case: the assistant message's calls and content. ids are 9 alphanumerics (Mistral's templates
// insist). Arguments are rendered both as objects and as JSON strings; each template keeps the forms it
// renders sensibly.
const CASES = [
  { name: "one_call", calls: [["get_weather", { location: "Paris", unit: "celsius" }]] },
  { name: "two_calls", calls: [["get_weather", { location: "Tokyo" }], ["get_time", { timezone: "Asia/Tokyo" }]] },
  { name: "rich_arguments", calls: [["search", {
    query: "caf\u00e9 \"quoted\" back\\slash\nnew line\ttab </tool_call> [ARGS] <|call|>",
    filters: { tags: ["a", "b", []], limit: 5, exact: true, score: -1.5e3, missing: null, nested: { deep: [{ x: 0.25 }] } },
    emoji: "\u{1F600} \u6771\u4EAC", empty: "" }]] },
  { name: "no_arguments", calls: [["get_time", {}]] },
  { name: "content_then_call", content: "Let me look that up.", calls: [["get_weather", { location: "Berlin" }]] },
  { name: "three_calls", calls: [["get_weather", { location: "Oslo" }], ["get_weather", { location: "Lima" }], ["search", { query: "x" }]] },
  { name: "reasoning_then_call", reasoning: "The user wants the weather; call the tool.", calls: [["get_weather", { location: "Rome" }]] },
  // (Llama 3.1's built-in tools, <|python_tag|>name.call(...), need the `reject` filter, which this
  // renderer lacks: test_tool_calls.c covers them by hand.)
];

// Mistral's templates put the system prompt into the last user turn, which moves when the assistant turn
// is added: those render without one.
const befores = [[{ role: "system", content: "Use tools when needed." }, { role: "user", content: "Help me, please." }],
  [{ role: "user", content: "Help me, please." }]];

function assistantMessage(c, stringArgs, emptyContent) {
  const m = {
    role: "assistant",
    content: c.content ?? (emptyContent ? "" : null),
    tool_calls: c.calls.map(([name, args], i) => ({ id: `call${String(i + 1).padStart(5, "0")}`, type: "function",
      function: { name, arguments: stringArgs ? JSON.stringify(args) : args } })),
  };
  if (c.reasoning) m.reasoning_content = c.reasoning;
  return m;
}

function render(tpl, special, messages, gen, extra) {
  return tpl.render({ messages, tools, add_generation_prompt: gen, ...special, ...extra });
}

const templates = [];
for (const [name, meta] of Object.entries(GOLDEN))
  templates.push({ name, ...meta, origin: `tests/chat_golden/templates/${name}.jinja`,
    source: readFileSync(join(here, "../chat_golden/templates", `${name}.jinja`), "utf8"), embed: false });
{
  const text = readFileSync(join(modules, "@huggingface/ollama-utils/dist/index.mjs"), "utf8");
  const head = "var OLLAMA_CHAT_TEMPLATE_MAPPING = ";
  const start = text.indexOf(head), end = text.indexOf("\n];", start);
  const map = JSON.parse(JSON.stringify(new Function(`return ${text.slice(start + head.length, end + 2)}`)()));
  for (const [model, meta] of Object.entries(OLLAMA)) {
    const entry = map.find((e) => e.model === model);
    if (!entry) throw new Error(`ollama-utils has no ${model}`);
    templates.push({ ...meta, origin: `@huggingface/ollama-utils@${ollamaVersion} ${model}`, source: entry.gguf, embed: true });
  }
}

const out = [];
for (const t of templates) {
  const tpl = new Template(t.source);
  const special = SPECIAL[t.name];
  const variants = [{ label: "", extra: {} }];
  if (t.name === "qwen3") variants.push({ label: "/enable_thinking=false", extra: { enable_thinking: false } });
  if (t.name === "deepseek_v3_1") variants.push({ label: "/thinking=true", extra: { thinking: true } });
  const seen = new Set();
  for (const v of variants) {
    for (const c of CASES) {
      if (c.only && c.only !== t.name) continue;
      for (const [stringArgs, emptyContent] of [[false, false], [true, false], [false, true], [true, true]]) {
        if (c.only && c.only !== t.name) continue;
        let prompt, full;
        const extra = { ...v.extra, ...(c.extra ?? {}) };
        for (const before of befores) {
          try {
            prompt = render(tpl, special, before, true, extra);
            full = render(tpl, special, [...before, assistantMessage(c, stringArgs, emptyContent)], false, extra);
          } catch (err) {
            if (process.env.DEBUG_CASES) console.error(t.name, c.name, err.message);
            full = undefined; // the template refuses this message (e.g. Llama: one call at a time)
            continue;
          }
          if (full.startsWith(prompt)) break;
          full = undefined;
        }
        if (full === undefined) continue;
        let text = full.slice(prompt.length);
        let cut = text.length;
        for (const m of END_OF_TURN) { const at = text.indexOf(m); if (at >= 0 && at < cut) cut = at; }
        text = text.slice(0, cut);
        // The template must have written every call (some write none, or "[object Map]" for objects).
        if (text.includes("[object Map]") || text.includes("[object Object]")) continue;
        if (!c.calls.every(([name]) => text.includes(name))) continue;
        if (seen.has(v.label + "\u0000" + text)) continue;
        seen.add(v.label + "\u0000" + text);
        const reasoning = c.reasoning && text.includes(c.reasoning) ? c.reasoning : "";
        const content = c.content && text.includes(c.content) ? c.content : "";
        out.push({
          id: `${t.name}${v.label}/${c.name}/${stringArgs ? "string" : "object"}`,
          template: t.name, format: t.format, think: t.think,
          prompt_opens_think: /<think>\s*$/.test(prompt),
          text, content, reasoning,
          calls: c.calls.map(([name, args]) => ({ name, arguments: args })),
        });
      }
    }
  }
}

const result = JSON.stringify({
  about: "Tool-call turns as real chat templates render them (made by tool_call_cases.mjs; do not edit by hand)",
  renderer: `@huggingface/jinja@${jinjaVersion}`,
  templates: templates.map((t) => ({ name: t.name, format: t.format, think: t.think, origin: t.origin, ...(t.embed ? { source: t.source } : {}) })),
  cases: out,
}, null, 1) + "\n";
const file = join(here, "tool_call_cases.json");
if (process.argv.includes("--check")) {
  if (readFileSync(file, "utf8") !== result) { console.error("tool_call_cases.json differs from a fresh render"); process.exit(1); }
} else {
  writeFileSync(file, result);
  const per = {};
  for (const c of out) per[c.template] = (per[c.template] ?? 0) + 1;
  console.log(`${out.length} cases`, per);
}
