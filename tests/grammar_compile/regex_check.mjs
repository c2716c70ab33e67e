// Independent check of kite's regex grammars: node's RegExp (u flag, full match) decides every string the
// C test tried. Input (argv[2]): a JSON array of {pattern, cases: [{s, accepted}]} where accepted is the
// grammar's answer. Prints each disagreement and a summary; exits 1 on any.
import { readFileSync } from "node:fs";

const items = JSON.parse(readFileSync(process.argv[2], "utf8"));
let checked = 0, failures = 0, matched = 0;
for (const item of items) {
  let re;
  try {
    re = new RegExp(`^(?:${item.pattern})$`, "u");
  } catch (err) {
    console.log(`${JSON.stringify(item.pattern)}: node rejects the pattern: ${err.message}`);
    failures++;
    continue;
  }
  for (const c of item.cases) {
    checked++;
    const want = re.test(c.s);
    if (want) matched++;
    if (want !== c.accepted) {
      console.log(`${JSON.stringify(item.pattern)}: ${JSON.stringify(c.s)}: RegExp says ${want}, grammar says ${c.accepted}`);
      failures++;
    }
  }
}
console.log(`regex_check: ${items.length} patterns, ${checked} strings (${matched} matching), ${failures} disagreements`);
process.exit(failures ? 1 : 0);
