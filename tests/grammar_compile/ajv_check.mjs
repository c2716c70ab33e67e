// Independent check of kite's JSON Schema grammars: ajv (draft-07, with ajv-formats) validates the texts
// the C test produced. Input (argv[2]): a JSON array of {name, schema, must_be_valid: [text], must_be_invalid: [text]}
// where each text is JSON as the grammar saw it (must_be_valid: random walks of the grammar, the fixture's
// valid instances and the instances the grammar accepted; must_be_invalid: the fixture's invalid instances).
// Prints one line per disagreement and a summary; exits 1 if any text disagrees or does not parse.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "oracle", "package.json"));
const Ajv = require("ajv");
const Ajv2020 = require("ajv/dist/2020");
const addFormats = require("ajv-formats");

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
let checked = 0, failures = 0;
for (const c of cases) {
  // strict off: schemas may carry annotations ajv does not know; formats per ajv-formats ("full" mode).
  // draft 2020-12 when the schema says so (prefixItems), else ajv's default draft 7.
  const is2020 = typeof c.schema === "object" && c.schema !== null && String(c.schema.$schema ?? "").includes("2020-12");
  const ajv = new (is2020 ? Ajv2020 : Ajv)({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv);
  let validate;
  try {
    validate = ajv.compile(c.schema);
  } catch (err) {
    console.log(`${c.name}: ajv cannot compile the schema: ${err.message}`);
    failures++;
    continue;
  }
  const check = (text, want) => {
    checked++;
    let value;
    try {
      value = JSON.parse(text);
    } catch (err) {
      if (want) {
        console.log(`${c.name}: not JSON: ${JSON.stringify(text)}`);
        failures++;
      }
      return;
    }
    const ok = validate(value);
    if (ok !== want) {
      const why = ok ? "valid" : ajv.errorsText(validate.errors);
      console.log(`${c.name}: expected ${want ? "valid" : "invalid"}, ajv says ${why}: ${JSON.stringify(text).slice(0, 300)}`);
      failures++;
    }
  };
  for (const t of c.must_be_valid) check(t, true);
  for (const t of c.must_be_invalid ?? []) check(t, false);
}
console.log(`ajv_check: ${cases.length} schemas, ${checked} texts, ${failures} disagreements`);
process.exit(failures ? 1 : 0);
