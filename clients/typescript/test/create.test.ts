import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { PayrailClient, PayrailError, TRANSFER_FIELDS, type Transfer } from "../src/index.js";
import { client, env, problemResponse, recordingFetch, transferParams, transfersWithKey } from "./helpers.js";

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

test("createTransfer creates a transfer under a key minted before the first attempt", async () => {
  const rec = recordingFetch();
  const c = client({ fetch: rec.fetch });
  const params = transferParams();
  const result = await c.createTransfer(params);

  assert.match(result.idempotencyKey, UUID_V4);
  assert.equal(result.replayed, false);
  assert.equal(rec.calls.length, 1);
  assert.equal(rec.calls[0]!.idempotencyKey, result.idempotencyKey);
  assert.equal(rec.calls[0]!.body, JSON.stringify(params));
  assert.ok(result.requestId, "X-Request-Id is passed on");

  const t = result.transfer;
  assert.deepEqual(Object.keys(t).sort(), [...TRANSFER_FIELDS].sort());
  assert.equal(t.status, "pending");
  assert.equal(t.amount, params.amount);
  assert.equal(t.currency, "USD");
  assert.equal(t.source_account, "acc_alice");
  assert.equal(t.destination_account, "acc_bob");
  assert.equal(t.description, params.description);
  assert.deepEqual(t.metadata, params.metadata);
  assert.equal(t.idempotency_key, result.idempotencyKey);

  const again = await c.getTransfer(t.id);
  assert.equal(again.id, t.id);
  assert.equal(again.idempotency_key, result.idempotencyKey);
});

test("the same key and request again is a replay, flagged replayed, with the same transfer", async () => {
  const c = client();
  const params = transferParams();
  const key = PayrailClient.newIdempotencyKey();
  const first = await c.createTransfer(params, { idempotencyKey: key });
  const second = await c.createTransfer(params, { idempotencyKey: key });
  assert.equal(first.replayed, false);
  assert.equal(second.replayed, true);
  assert.equal(second.idempotencyKey, key);
  assert.deepEqual(second.transfer, first.transfer);
  assert.equal((await transfersWithKey(c, key)).length, 1);
});

test("an attempt that times out while the server commits it is retried with the same key: one transfer", async () => {
  let firstAnswer: Transfer | undefined;
  const rec = recordingFetch((call, input, init) => {
    if (call !== 1) return undefined;
    // The request reaches the server and is committed, but its answer is
    // lost: this attempt ends only when the client's own timeout fires.
    return (async () => {
      const { signal, ...rest } = init;
      const res = await fetch(input, rest);
      assert.equal(res.status, 201);
      firstAnswer = (await res.json()) as Transfer;
      await new Promise((resolve) => signal!.addEventListener("abort", resolve, { once: true }));
      throw signal!.reason ?? new DOMException("aborted", "AbortError");
    })();
  });
  const c = client({ fetch: rec.fetch, timeoutMs: 1000 });
  const result = await c.createTransfer(transferParams());

  assert.equal(rec.calls.length, 2, "one timed-out attempt, one retry");
  assert.equal(rec.calls[0]!.idempotencyKey, result.idempotencyKey);
  assert.equal(rec.calls[1]!.idempotencyKey, result.idempotencyKey);
  assert.equal(rec.calls[1]!.body, rec.calls[0]!.body, "the same body bytes");
  assert.equal(result.replayed, true, "the retry got the stored first answer");
  assert.ok(firstAnswer);
  assert.equal(result.transfer.id, firstAnswer.id);

  const mine = await transfersWithKey(c, result.idempotencyKey);
  assert.equal(mine.length, 1, "exactly one transfer for the key");
  assert.equal(mine[0]!.id, firstAnswer.id);
  assert.equal((await c.getTransfer(firstAnswer.id)).idempotency_key, result.idempotencyKey);
});

for (const [status, slug] of [
  [503, "unavailable"],
  [429, "rate-limited"],
  [409, "request-in-progress"],
] as const) {
  test(`a ${status} with Retry-After is waited out, then retried with the same key and bytes`, async () => {
    const rec = recordingFetch((call) => (call === 1 ? Promise.resolve(problemResponse(status, slug, "1")) : undefined));
    const c = client({ fetch: rec.fetch });
    const result = await c.createTransfer(transferParams());

    assert.equal(rec.calls.length, 2);
    const waited = rec.calls[1]!.at - rec.calls[0]!.at;
    assert.ok(waited >= 950, `waited ${waited} ms for Retry-After: 1`);
    assert.ok(waited < 3000, `waited ${waited} ms, not much more than Retry-After`);
    assert.equal(rec.calls[0]!.idempotencyKey, result.idempotencyKey);
    assert.equal(rec.calls[1]!.idempotencyKey, result.idempotencyKey);
    assert.equal(rec.calls[1]!.body, rec.calls[0]!.body);
    assert.equal(result.replayed, false, "the synthetic answer stored nothing; the retry created it");
    assert.equal((await transfersWithKey(c, result.idempotencyKey)).length, 1);
  });
}

test("Retry-After as an HTTP date is honoured", async () => {
  const when = new Date(Date.now() + 2000).toUTCString(); // second precision: 1-2 s ahead
  const rec = recordingFetch((call) => (call === 1 ? Promise.resolve(problemResponse(503, "overloaded", when)) : undefined));
  const c = client({ fetch: rec.fetch });
  await c.createTransfer(transferParams());
  const waited = rec.calls[1]!.at - rec.calls[0]!.at;
  assert.ok(waited >= 900 && waited < 3500, `waited ${waited} ms`);
});

test("a 422 is not retried; the error carries the problem and the key, and the key stays usable", async () => {
  const rec = recordingFetch();
  const c = client({ fetch: rec.fetch });
  const key = PayrailClient.newIdempotencyKey();
  const bad = { ...transferParams(), amount: 0, destination_account: "acc_alice" };
  const err = await c.createTransfer(bad, { idempotencyKey: key }).then(
    () => assert.fail("a 422 must reject"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof PayrailError);
  assert.equal(rec.calls.length, 1, "not retried");
  assert.equal(err.status, 422);
  assert.equal(err.type, "/problems/validation-failed");
  assert.equal(err.slug, "validation-failed");
  assert.ok(err.title.length > 0);
  assert.ok(err.detail.length > 0);
  assert.equal(err.idempotencyKey, key);
  assert.equal(err.retryable, false);
  assert.ok(err.requestId);
  assert.ok(err.errors?.some((e) => e.field === "amount"), JSON.stringify(err.errors));
  assert.ok(err.errors?.some((e) => e.field === "destination_account"), JSON.stringify(err.errors));

  // A refused request stores nothing: the same key with a valid body creates.
  const ok = await c.createTransfer(transferParams(), { idempotencyKey: key });
  assert.equal(ok.replayed, false);
  assert.equal(rec.calls.length, 2);
});

test("a reused key with a different request is a 422 idempotency-key-reused, not retried", async () => {
  const rec = recordingFetch();
  const c = client({ fetch: rec.fetch });
  const key = PayrailClient.newIdempotencyKey();
  await c.createTransfer(transferParams(), { idempotencyKey: key });
  await assert.rejects(c.createTransfer(transferParams(), { idempotencyKey: key }), (e: unknown) => {
    assert.ok(e instanceof PayrailError);
    assert.equal(e.status, 422);
    assert.equal(e.slug, "idempotency-key-reused");
    assert.equal(e.idempotencyKey, key);
    return true;
  });
  assert.equal(rec.calls.length, 2);
});

test("other 4xx are not retried (401)", async () => {
  const rec = recordingFetch();
  const c = new PayrailClient({ baseUrl: client().baseUrl, apiKey: "prk_not_a_key", fetch: rec.fetch });
  await assert.rejects(c.createTransfer(transferParams()), (e: unknown) => {
    assert.ok(e instanceof PayrailError);
    assert.equal(e.status, 401);
    assert.equal(e.slug, "unauthorized");
    return true;
  });
  assert.equal(rec.calls.length, 1);
});

test("network errors are retried up to maxRetries, then reject with the key", async () => {
  const rec = recordingFetch(() => Promise.reject(new TypeError("fetch failed")));
  const c = client({ fetch: rec.fetch, maxRetries: 2 });
  const key = PayrailClient.newIdempotencyKey();
  await assert.rejects(c.createTransfer(transferParams(), { idempotencyKey: key }), (e: unknown) => {
    assert.ok(e instanceof PayrailError);
    assert.equal(e.status, 0);
    assert.equal(e.type, "network-error");
    assert.equal(e.idempotencyKey, key);
    assert.equal(e.attempts, 3);
    assert.equal(e.retryable, true);
    return true;
  });
  assert.equal(rec.calls.length, 3);
  assert.ok(rec.calls.every((s) => s.idempotencyKey === key));
});

test("the key survives an app restart: stored before the first attempt, the new instance replays it", async () => {
  const storage = join(mkdtempSync(join(tmpdir(), "payrail-sdk-")), "pending-intent.json");
  const params = transferParams();

  // Run 1: mint and store the key, then the app dies before the answer arrives.
  const key = PayrailClient.newIdempotencyKey();
  writeFileSync(storage, JSON.stringify({ key, params }));
  let committed: Transfer | undefined;
  const dying = recordingFetch((_call, input, init) =>
    (async () => {
      const { signal: _signal, ...rest } = init;
      const res = await fetch(input, rest);
      committed = (await res.json()) as Transfer;
      throw new TypeError("socket hang up"); // the process is killed here
    })(),
  );
  await assert.rejects(
    new PayrailClient({ ...optionsOf(client()), fetch: dying.fetch, maxRetries: 0 }).createTransfer(params, {
      idempotencyKey: key,
    }),
    (e: unknown) => e instanceof PayrailError && e.idempotencyKey === key,
  );
  assert.ok(committed);

  // Run 2: a fresh client instance, the stored intent.
  const stored = JSON.parse(readFileSync(storage, "utf8")) as { key: string; params: typeof params };
  const fresh = client();
  const result = await fresh.createTransfer(stored.params, { idempotencyKey: stored.key });
  assert.equal(result.replayed, true);
  assert.equal(result.idempotencyKey, key);
  assert.equal(result.transfer.id, committed.id);
  assert.equal((await transfersWithKey(fresh, key)).length, 1);
});

test("getTransfer of an unknown id rejects with 404 not-found", async () => {
  await assert.rejects(client().getTransfer("00000000-0000-4000-8000-000000000000"), (e: unknown) => {
    assert.ok(e instanceof PayrailError);
    assert.equal(e.status, 404);
    assert.equal(e.slug, "not-found");
    assert.equal(e.idempotencyKey, undefined);
    return true;
  });
});

function optionsOf(c: PayrailClient) {
  return { baseUrl: c.baseUrl, apiKey: process.env.PAYRAIL_API_KEY! };
}

test("the caller's signal stops the retries; the error keeps the key", async () => {
  const rec = recordingFetch(() => Promise.resolve(problemResponse(503, "unavailable", "30")));
  const c = client({ fetch: rec.fetch });
  const controller = new AbortController();
  const started = Date.now();
  setTimeout(() => controller.abort(), 200);
  await assert.rejects(c.createTransfer(transferParams(), { signal: controller.signal }), (e: unknown) => {
    assert.ok(e instanceof PayrailError);
    assert.equal(e.type, "aborted");
    assert.ok(e.idempotencyKey);
    return true;
  });
  assert.ok(Date.now() - started < 5000, "did not wait out Retry-After: 30");
  assert.equal(rec.calls.length, 1);
});

test("the last retryable answer is the error once retries run out", async () => {
  const rec = recordingFetch(() => Promise.resolve(problemResponse(503, "overloaded", "0")));
  const c = client({ fetch: rec.fetch, maxRetries: 2 });
  await assert.rejects(c.createTransfer(transferParams()), (e: unknown) => {
    assert.ok(e instanceof PayrailError);
    assert.equal(e.status, 503);
    assert.equal(e.slug, "overloaded");
    assert.equal(e.retryAfter, 0);
    assert.equal(e.attempts, 3);
    return true;
  });
  assert.equal(rec.calls.length, 3);
  assert.equal(new Set(rec.calls.map((s) => s.idempotencyKey)).size, 1);
  assert.equal(new Set(rec.calls.map((s) => s.body)).size, 1);
});

test("a real 429 rate-limited from the server is waited out and retried with the same key", async () => {
  const statuses: number[] = [];
  const rec = recordingFetch((_call, input, init) =>
    fetch(input, init).then((res) => {
      statuses.push(res.status);
      return res;
    }),
  );
  // This server lets a client make 1 request per second.
  const c = new PayrailClient({ baseUrl: env("PAYRAIL_LIMITED_URL"), apiKey: env("PAYRAIL_API_KEY"), fetch: rec.fetch });
  const first = await c.createTransfer(transferParams());
  const second = await c.createTransfer(transferParams());
  assert.equal(first.replayed, false);
  assert.equal(second.replayed, false);
  assert.ok(statuses.includes(429), `a 429 was answered: ${statuses.join(", ")}`);
  assert.equal(statuses.at(-1), 201);
  const secondCalls = rec.calls.filter((s) => s.idempotencyKey === second.idempotencyKey);
  assert.ok(secondCalls.length >= 2);
  assert.equal(new Set(secondCalls.map((s) => s.body)).size, 1);
  assert.equal((await transfersWithKey(client(), second.idempotencyKey)).length, 1);
});
