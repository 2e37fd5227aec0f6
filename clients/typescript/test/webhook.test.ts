import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { PayrailClient, WebhookVerificationError, signWebhook, verifyWebhook } from "../src/index.js";
import { baseUrl, client, env, transferParams } from "./helpers.js";

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

/** One request the receiver got: its headers and its body's bytes, untouched. */
interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

test("verifyWebhook accepts a real delivery from the engine, and rejects it tampered or with another secret", async () => {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      received.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const auth = { Authorization: `Bearer ${env("PAYRAIL_API_KEY")}` };
  let endpointId: string | undefined;
  try {
    const registered = await fetch(`${baseUrl()}/webhook_endpoints`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({ url: `http://127.0.0.1:${port}/hooks` }),
    });
    const endpoint = (await registered.json()) as { id: string; secret: string };
    assert.equal(registered.status, 201, JSON.stringify(endpoint));
    endpointId = endpoint.id;
    const secret = endpoint.secret;
    assert.match(secret, /^whsec_[A-Za-z0-9+/]+={0,2}$/);

    const { transfer } = await client().createTransfer(transferParams());

    // Other tests' transfers of the same client are announced here too:
    // wait for the one whose event is about this transfer.
    const isOurs = (r: Received) => {
      try {
        return (JSON.parse(r.body.toString("utf8")) as { data?: { object?: { id?: string } } }).data?.object?.id === transfer.id;
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 20_000;
    let delivery: Received | undefined;
    while (!(delivery = received.find(isOurs)) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.ok(delivery, `no delivery about transfer ${transfer.id} within 20 s (${received.length} other deliveries)`);
    assert.equal(delivery.method, "POST");
    assert.equal(delivery.url, "/hooks");

    // The headers as Node parsed them and the raw bytes, as a receiver has them.
    const event = (await verifyWebhook(secret, delivery.headers, delivery.body)) as {
      id: string;
      type: string;
      data: { object: { id: string; status: string } };
    };
    assert.deepEqual(event, JSON.parse(delivery.body.toString("utf8")));
    assert.equal(event.id, delivery.headers["webhook-id"]);
    assert.match(event.id, /^evt_/);
    assert.equal(event.data.object.id, transfer.id);
    assert.equal(event.type, `transfer.${event.data.object.status}`);
    // The same delivery as text, and its headers as a fetch Headers.
    const asText = delivery.body.toString("utf8");
    const fetchHeaders = new Headers(
      Object.entries(delivery.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")] as [string, string]),
    );
    assert.deepEqual(await verifyWebhook(secret, fetchHeaders, asText), event);

    // One byte of the body changed (inside the transfer id): rejected.
    const tampered = Buffer.from(delivery.body);
    const at = tampered.indexOf(transfer.id) + transfer.id.length - 1;
    assert.ok(at > 0);
    tampered[at] = tampered[at] === 0x30 ? 0x31 : 0x30;
    assert.notDeepEqual(tampered, delivery.body);
    await rejects(verifyWebhook(secret, delivery.headers, tampered));
    // Another secret: rejected.
    await rejects(verifyWebhook(`whsec_${randomBytes(32).toString("base64")}`, delivery.headers, delivery.body));
  } finally {
    // No more deliveries to a receiver that is going away.
    if (endpointId !== undefined) {
      await fetch(`${baseUrl()}/webhook_endpoints/${endpointId}`, { method: "DELETE", headers: auth }).then((r) => r.body?.cancel());
    }
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
