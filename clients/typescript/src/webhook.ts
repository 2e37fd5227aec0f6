import { base64Decode, base64Encode } from "./base64.js";
import { WebhookVerificationError } from "./errors.js";

/** Webhook headers: a fetch `Headers`, or a plain object such as Node's `req.headers`. */
export type WebhookHeaders =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

export interface VerifyWebhookOptions {
  /** How far `webhook-timestamp` may be from now, in seconds (default 300). */
  toleranceSec?: number;
  /** The current time in milliseconds since the epoch (default `Date.now()`). */
  now?: number;
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === "function") {
    return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | string[] | undefined>;
  for (const key of Object.keys(record)) {
    if (key.toLowerCase() === name) {
      const value = record[key];
      return Array.isArray(value) ? value.join(", ") : value;
    }
  }
  return undefined;
}

/** Compares two byte strings in time that depends only on their lengths. */
function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

function subtleCrypto(): SubtleCrypto {
  const subtle = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (!subtle) {
    throw new WebhookVerificationError("WebCrypto (globalThis.crypto.subtle) is not available in this runtime");
  }
  return subtle;
}

/**
 * Checks a webhook delivery (Standard Webhooks 1.0) and returns its parsed
 * JSON body. Rejects with {@link WebhookVerificationError} when a header is
 * missing, the timestamp is more than `toleranceSec` away from now, or no
 * `v1` signature in `webhook-signature` matches.
 *
 * Pass the body exactly as received (the raw bytes or text, not re-serialized
 * JSON). `secret` is the endpoint's `whsec_…` secret. During a secret
 * rotation a delivery carries several signatures; any one matching is enough.
 */
export async function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  rawBody: string | Uint8Array | ArrayBuffer,
  options: VerifyWebhookOptions = {},
): Promise<unknown> {
  const toleranceSec = options.toleranceSec ?? 300;
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) {
    throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header");
  }
  if (!/^\d{1,15}$/.test(timestamp.trim())) {
    throw new WebhookVerificationError("webhook-timestamp is not a number of seconds");
  }
  const nowSec = Math.floor((options.now ?? Date.now()) / 1000);
  const sentSec = Number(timestamp.trim());
  if (Math.abs(nowSec - sentSec) > toleranceSec) {
    throw new WebhookVerificationError("webhook-timestamp is too far from the current time");
  }

  const keyBytes = base64Decode(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret);
  if (!keyBytes || keyBytes.length === 0) {
    throw new WebhookVerificationError("the secret is not whsec_ followed by base64");
  }
  const body =
    typeof rawBody === "string"
      ? new TextEncoder().encode(rawBody)
      : rawBody instanceof Uint8Array
        ? rawBody
        : new Uint8Array(rawBody);
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix, 0);
  signed.set(body, prefix.length);

  const subtle = subtleCrypto();
  const key = await subtle.importKey("raw", new Uint8Array(keyBytes), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const expected = new Uint8Array(await subtle.sign("HMAC", key, signed));

  let matched = false;
  for (const entry of signatures.split(" ")) {
    const comma = entry.indexOf(",");
    if (comma < 0 || entry.slice(0, comma) !== "v1") continue;
    const given = base64Decode(entry.slice(comma + 1));
    // Every candidate is compared, so the time taken does not tell which matched.
    if (given && constantTimeEqual(given, expected)) matched = true;
  }
  if (!matched) throw new WebhookVerificationError("no webhook-signature matches");

  const text = new TextDecoder().decode(body);
  try {
    return JSON.parse(text);
  } catch {
    throw new WebhookVerificationError("the body is not JSON");
  }
}

/** Signs a payload the way payrail does; for tests of your webhook receiver. */
export async function signWebhook(secret: string, id: string, timestampSec: number, rawBody: string): Promise<string> {
  const keyBytes = base64Decode(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret);
  if (!keyBytes) throw new WebhookVerificationError("the secret is not whsec_ followed by base64");
  const subtle = subtleCrypto();
  const key = await subtle.importKey("raw", new Uint8Array(keyBytes), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await subtle.sign("HMAC", key, new TextEncoder().encode(`${id}.${timestampSec}.${rawBody}`));
  return `v1,${base64Encode(new Uint8Array(mac))}`;
}
