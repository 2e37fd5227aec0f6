import assert from "node:assert/strict";
import { test } from "node:test";

import { PayrailClient, PayrailError } from "../src/index.js";
import { baseUrl, env, recordingFetch, transferParams } from "./helpers.js";

// A client of its own (PAYRAIL_API_KEY_2), so the other test files' transfers
// do not show up here.
test("listTransfers walks every page, newest first", async () => {
  const rec = recordingFetch();
  const c = new PayrailClient({ baseUrl: baseUrl(), apiKey: env("PAYRAIL_API_KEY_2"), fetch: rec.fetch });
  const created: string[] = [];
  for (let i = 0; i < 7; i++) created.push((await c.createTransfer(transferParams())).transfer.id);
  rec.calls.length = 0;

  const seen = [];
  for await (const t of c.listTransfers({ limit: 3 })) seen.push(t);

  assert.deepEqual(
    seen.map((t) => t.id),
    [...created].reverse(),
    "all seven, newest first, none twice",
  );
  assert.equal(rec.calls.length, 3, "pages of 3, 3 and 1");
  assert.ok(rec.calls.every((s) => s.method === "GET" && s.url.includes("limit=3")));
  assert.ok(!rec.calls[0]!.url.includes("starting_after"));
  assert.ok(rec.calls[1]!.url.includes(`starting_after=${created[4]}`));
  assert.ok(rec.calls[2]!.url.includes(`starting_after=${created[1]}`));

  // startingAfter resumes after a given transfer; a page on its own.
  const rest = [];
  for await (const t of c.listTransfers({ startingAfter: created[3] })) rest.push(t.id);
  assert.deepEqual(rest, [created[2], created[1], created[0]]);
  const page = await c.listTransfersPage({ limit: 2 });
  assert.equal(page.data.length, 2);
  assert.equal(page.has_more, true);

  // Breaking out of the loop stops fetching.
  rec.calls.length = 0;
  for await (const _t of c.listTransfers({ limit: 2 })) break;
  assert.equal(rec.calls.length, 1);
});

test("listTransfers rejects a bad limit with the problem", async () => {
  const c = new PayrailClient({ baseUrl: baseUrl(), apiKey: env("PAYRAIL_API_KEY_2") });
  await assert.rejects(
    (async () => {
      for await (const _t of c.listTransfers({ limit: 500 })) void _t;
    })(),
    (e: unknown) => e instanceof PayrailError && e.status === 422 && e.errors?.[0]?.field === "limit",
  );
});
