// The README's example, run as written against the test server (only the
// address is swapped: the README uses payrail dev's 127.0.0.1:8080).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { baseUrl, env } from "./helpers.js";

const pkgDir = fileURLToPath(new URL("../../", import.meta.url));

test("the README example runs as written", async () => {
  const readme = readFileSync(`${pkgDir}README.md`, "utf8");
  const match = /```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(match, "the README has a ```js example");
  const code = match[1]!;
  assert.ok(code.includes('"http://127.0.0.1:8080"'), "the example uses payrail dev's address");
  assert.ok(code.split("\n").filter((l) => l.trim()).length <= 14, "the example stays short");
  // Inside the package folder, so `@payrail/client` resolves to this package.
  const file = `${pkgDir}dist-test/readme-example.mjs`;
  writeFileSync(file, code.replaceAll('"http://127.0.0.1:8080"', JSON.stringify(baseUrl())));
  const { stdout } = await promisify(execFile)(process.execPath, [file], {
    env: { ...process.env, PAYRAIL_API_KEY: env("PAYRAIL_API_KEY") },
    timeout: 30_000,
  });
  assert.match(stdout, /created [0-9a-f-]{36} pending replayed=false/);
  assert.match(stdout, /retried [0-9a-f-]{36} replayed=true/);
});
