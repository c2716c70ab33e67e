// The reference tokenizer: @lenml/tokenizers (tests/oracle/node_modules, transformers.js's tokenizers)
// encodes each text argument with a Hugging Face tokenizer folder (tokenizer.json and
// tokenizer_config.json), special-token text included, no BOS added; prints one JSON array per text.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const source = process.env.KITE_SOURCE_DIR;
const lib = join(source, "tests", "oracle", "node_modules", "@lenml", "tokenizers", "dist", "main.mjs");
const { TokenizerLoader } = await import(pathToFileURL(lib).href);
const dir = process.argv[2];
const readJson = (name) => JSON.parse(readFileSync(join(dir, name), "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON: readJson("tokenizer.json"), tokenizerConfig: readJson("tokenizer_config.json") });
for (const text of process.argv.slice(3)) console.log(JSON.stringify(Array.from(tokenizer.encode(text, { add_special_tokens: false }))));
