import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { test } from "node:test";

import { PayrailClient, WebhookVerificationError, signWebhook, verifyWebhook } from "../src/index.js";

// Signed here independently of the SDK, with node:crypto, the way the
// engine signs deliveries (Standard Webhooks 1.0).
const secretBytes = randomBytes(32);
const secret = `whsec_${secretBytes.toString("base64")}`;
const now = () => Math.floor(Date.now() / 1000);

function sign(id: string, ts: number, body: string, key: Buffer = secretBytes): string {
  return `v1,${createHmac("sha256", key).update(`${id}.${ts}.${body}`).digest("base64")}`;
}

function delivery(body: string, ts = now()) {
  const id = `evt_${crypto.randomUUID()}`;
  return {
    body,
    headers: {
      "content-type": "application/json",
      "webhook-id": id,
      "webhook-timestamp": String(ts),
      "webhook-signature": sign(id, ts, body),
    } as Record<string, string>,
  };
}

const event = JSON.stringify({
  id: "evt_x",
  type: "transfer.succeeded",
  created_at: "2026-12-03T10:15:30.123456Z",
  data: { object: { id: "0193a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d", status: "succeeded", description: "café ☕" } },
});

const rejects = (p: Promise<unknown>) => assert.rejects(p, WebhookVerificationError);

test("verifyWebhook accepts a correctly signed delivery and returns its payload", async () => {
  const d = delivery(event);
  assert.deepEqual(await verifyWebhook(secret, d.headers, d.body), JSON.parse(event));
  // Raw bytes, a fetch Headers object, the static and instance forms.
  assert.deepEqual(await verifyWebhook(secret, new Headers(d.headers), new TextEncoder().encode(d.body)), JSON.parse(event));
  assert.ok(await PayrailClient.verifyWebhook(secret, d.headers, Buffer.from(d.body)));
  const upper = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k.toUpperCase(), v]));
  assert.ok(await verifyWebhook(secret, upper, d.body), "header names are case-insensitive");
});

test("verifyWebhook accepts when any of several signatures matches (secret rotation)", async () => {
  const d = delivery(event);
  const oldKey = randomBytes(32);
  d.headers["webhook-signature"] = `${sign(d.headers["webhook-id"]!, Number(d.headers["webhook-timestamp"]), event, oldKey)} ${d.headers["webhook-signature"]}`;
  assert.ok(await verifyWebhook(secret, d.headers, d.body));
  assert.ok(await verifyWebhook(`whsec_${oldKey.toString("base64")}`, d.headers, d.body));
});

test("verifyWebhook rejects a tampered body", async () => {
  const d = delivery(event);
  await rejects(verifyWebhook(secret, d.headers, d.body.replace("succeeded", "failed")));
  await rejects(verifyWebhook(secret, d.headers, d.body + " "));
});

test("verifyWebhook rejects a wrong secret", async () => {
  const d = delivery(event);
  await rejects(verifyWebhook(`whsec_${randomBytes(32).toString("base64")}`, d.headers, d.body));
});

test("verifyWebhook rejects an old or future timestamp, and honours toleranceSec", async () => {
  const old = delivery(event, now() - 301 - 5);
  await rejects(verifyWebhook(secret, old.headers, old.body));
  assert.ok(await verifyWebhook(secret, old.headers, old.body, { toleranceSec: 600 }));
  const future = delivery(event, now() + 400);
  await rejects(verifyWebhook(secret, future.headers, future.body));
  // A fresh signature with the timestamp header changed afterwards.
  const moved = delivery(event);
  moved.headers["webhook-timestamp"] = String(now() - 1);
  await rejects(verifyWebhook(secret, moved.headers, moved.body));
});

test("verifyWebhook rejects missing headers, other versions and garbage signatures", async () => {
  const d = delivery(event);
  for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
    const h = { ...d.headers };
    delete h[name];
    await rejects(verifyWebhook(secret, h, d.body));
  }
  await rejects(verifyWebhook(secret, { ...d.headers, "webhook-signature": d.headers["webhook-signature"]!.replace("v1,", "v2,") }, d.body));
  await rejects(verifyWebhook(secret, { ...d.headers, "webhook-signature": "v1,not*base64" }, d.body));
  await rejects(verifyWebhook(secret, { ...d.headers, "webhook-signature": "v1," }, d.body));
  await rejects(verifyWebhook(secret, { ...d.headers, "webhook-timestamp": "soon" }, d.body));
});

test("signWebhook signs as node:crypto does", async () => {
  const ts = now();
  assert.equal(await signWebhook(secret, "evt_1", ts, event), sign("evt_1", ts, event));
});
