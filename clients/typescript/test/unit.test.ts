import assert from "node:assert/strict";
import { test } from "node:test";

import { PayrailClient, backoffDelayMs, isRetryableStatus, parseRetryAfter } from "../src/index.js";

test("newIdempotencyKey is a fresh UUID v4", () => {
  const keys = new Set(Array.from({ length: 1000 }, () => PayrailClient.newIdempotencyKey()));
  assert.equal(keys.size, 1000);
  for (const k of keys) assert.match(k, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});

test("backoff: full jitter under 0.5 s · 2^n, capped at 8 s", () => {
  assert.equal(backoffDelayMs(1, () => 0), 0);
  assert.equal(backoffDelayMs(1, () => 0.999999), 499);
  assert.equal(backoffDelayMs(2, () => 0.999999), 999);
  assert.equal(backoffDelayMs(4, () => 0.999999), 3999);
  assert.equal(backoffDelayMs(5, () => 0.999999), 7999);
  assert.equal(backoffDelayMs(30, () => 0.999999), 7999);
  for (let i = 0; i < 100; i++) assert.ok(backoffDelayMs(3) < 2000);
});

test("Retry-After: seconds or an HTTP date, at most 60 s", () => {
  assert.equal(parseRetryAfter("1"), 1000);
  assert.equal(parseRetryAfter(" 0 "), 0);
  assert.equal(parseRetryAfter("3600"), 60_000);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter("-5"), undefined);
  const now = Date.parse("Wed, 21 Oct 2026 07:28:00 GMT");
  assert.equal(parseRetryAfter("Wed, 21 Oct 2026 07:28:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("Wed, 21 Oct 2026 07:27:00 GMT", now), 0);
  assert.equal(parseRetryAfter("Wed, 21 Oct 2026 09:00:00 GMT", now), 60_000);
});

test("which statuses are retried", () => {
  for (const s of [0, 408, 409, 429, 500, 502, 503, 504]) assert.equal(isRetryableStatus(s), true, String(s));
  for (const s of [400, 401, 403, 404, 405, 413, 415, 422]) assert.equal(isRetryableStatus(s), false, String(s));
});

test("the constructor trims the base URL and checks its options", () => {
  const c = new PayrailClient({ baseUrl: "http://x:1//", apiKey: "k" });
  assert.equal(c.baseUrl, "http://x:1");
  assert.equal(c.maxRetries, 3);
  assert.equal(c.timeoutMs, 10_000);
  assert.throws(() => new PayrailClient({ baseUrl: "", apiKey: "k" }), TypeError);
  assert.throws(() => new PayrailClient({ baseUrl: "http://x", apiKey: "" }), TypeError);
});

test("the package has no runtime dependencies", async () => {
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8"));
  assert.equal(pkg.dependencies, undefined);
  assert.deepEqual(Object.keys(pkg.devDependencies).sort(), ["@types/node", "typescript"]);
});
