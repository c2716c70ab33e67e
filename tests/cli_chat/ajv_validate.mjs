// The reference validator: ajv (tests/oracle/node_modules). Reads a job file (JSON: {"schema": ...,
// "values": [...]}) and writes one line per value: "ok", or the validator's errors.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { resolve } from "node:path";

const oracle = createRequire(resolve(process.env.KITE_SOURCE_DIR, "tests", "oracle", "package.json"));
const Ajv = oracle("ajv").default ?? oracle("ajv");
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const ajv = new Ajv({ strict: false, allErrors: true });
const validate = ajv.compile(job.schema);
for (const value of job.values) process.stdout.write((validate(value) ? "ok" : ajv.errorsText(validate.errors)) + "\n");
