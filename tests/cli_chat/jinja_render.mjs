// The reference renderer: @huggingface/jinja (tests/oracle/node_modules), as transformers.js's
// apply_chat_template uses it. Reads a job file (JSON: {"template": source, "variables": {...}}) and
// writes the rendered text to stdout exactly, with no newline added.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const source = process.env.KITE_SOURCE_DIR;
const jinjaPath = join(source, "tests", "oracle", "node_modules", "@huggingface", "jinja", "dist", "index.js");
const { Template } = await import(pathToFileURL(jinjaPath).href);

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const text = new Template(job.template).render(job.variables);
process.stdout.write(text);
