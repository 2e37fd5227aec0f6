import { PayrailError, isRetryableStatus } from "./errors.js";
import type { CreateTransferParams, FieldError, Transfer, TransferList } from "./types.js";
import { verifyWebhook, type VerifyWebhookOptions, type WebhookHeaders } from "./webhook.js";

/** The `fetch` the client calls; any WHATWG-compatible implementation. */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface PayrailClientOptions {
  /** Where `payrail serve` listens, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** The client's API key (`prk_…`). */
  apiKey: string;
  /** Retries after the first attempt (default 3); 0 disables retrying. */
  maxRetries?: number;
  /** Time allowed for one attempt, answer body included, in ms (default 10 000). */
  timeoutMs?: number;
  /** A `fetch` to use instead of `globalThis.fetch`. */
  fetch?: FetchLike;
}

export interface RequestOptions {
  /** Stops the call (no further retries); it rejects with a `PayrailError` of type `aborted`. */
  signal?: AbortSignal;
}

export interface CreateTransferOptions extends RequestOptions {
  /**
   * The intent's key. Mint it with {@link PayrailClient.newIdempotencyKey},
   * store it with the intent before the first call and pass it again after a
   * crash or restart. Without one, a new key is minted for this call.
   */
  idempotencyKey?: string;
}

export interface CreateTransferResult {
  /** The transfer as created (`status: "pending"`; read its current state with `getTransfer`). */
  transfer: Transfer;
  /** True when the server answered with the stored first answer of this key. */
  replayed: boolean;
  /** The key the transfer is stored under. */
  idempotencyKey: string;
  /** `X-Request-Id` of the answer. */
  requestId: string | undefined;
}

export interface ListTransfersOptions extends RequestOptions {
  /** Page size, 1–100 (server default 20). */
  limit?: number;
  /** Start after this transfer id (exclusive); transfers come newest first. */
  startingAfter?: string;
}

/** Backoff: full jitter over an exponential ceiling. */
const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 8_000;
/** The longest `Retry-After` honoured. */
const RETRY_AFTER_CAP_MS = 60_000;

/** The delay before retry number `retry` (1-based): uniform in [0, min(cap, base·2^(retry−1))]. */
export function backoffDelayMs(retry: number, random: () => number = Math.random): number {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, retry - 1));
  return Math.floor(random() * ceiling);
}

/** `Retry-After` (delta-seconds or an HTTP date) in ms, at most 60 s; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (text === "") return undefined;
  let ms: number;
  if (/^\d+$/.test(text)) {
    ms = Number(text) * 1000;
  } else if (/^[A-Za-z]{3}/.test(text)) {
    // An HTTP date starts with the day's name in all three of its forms.
    const date = Date.parse(text);
    if (Number.isNaN(date)) return undefined;
    ms = date - now;
  } else {
    return undefined;
  }
  return Math.min(RETRY_AFTER_CAP_MS, Math.max(0, ms));
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function randomUuidV4(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  if (c && typeof c.getRandomValues === "function") {
    // Runtimes without randomUUID (older React Native with a
    // getRandomValues polyfill): RFC 9562 version 4 from 122 random bits.
    const b = c.getRandomValues(new Uint8Array(16));
    b[6] = (b[6]! & 0x0f) | 0x40;
    b[8] = (b[8]! & 0x3f) | 0x80;
    const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  throw new Error("no crypto.randomUUID or crypto.getRandomValues in this runtime: pass an idempotencyKey");
}

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
  requestId: string | undefined;
}

interface SendOptions {
  method: "GET" | "POST";
  path: string;
  body?: string;
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/**
 * The payrail API client. Uses only `fetch`, `AbortController` and `crypto`,
 * so it runs on Node ≥ 18, in browsers and in React Native.
 */
export class PayrailClient {
  readonly baseUrl: string;
  readonly maxRetries: number;
  readonly timeoutMs: number;
  readonly #apiKey: string;
  readonly #fetch: FetchLike;

  constructor(options: PayrailClientOptions) {
    if (!options || !options.baseUrl) throw new TypeError("PayrailClient: baseUrl is required");
    if (!options.apiKey) throw new TypeError("PayrailClient: apiKey is required");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    this.maxRetries = Math.max(0, Math.floor(options.maxRetries ?? 3));
    this.timeoutMs = options.timeoutMs ?? 10_000;
    // Called through a closure: browsers refuse a fetch called with another `this`.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  /** A new idempotency key (a UUID v4). Store it with the intent before the first attempt. */
  static newIdempotencyKey(): string {
    return randomUuidV4();
  }

  /** See {@link verifyWebhook}. */
  static verifyWebhook(
    secret: string,
    headers: WebhookHeaders,
    rawBody: string | Uint8Array | ArrayBuffer,
    options?: VerifyWebhookOptions,
  ): Promise<unknown> {
    return verifyWebhook(secret, headers, rawBody, options);
  }

  /** See {@link verifyWebhook}. */
  verifyWebhook(
    secret: string,
    headers: WebhookHeaders,
    rawBody: string | Uint8Array | ArrayBuffer,
    options?: VerifyWebhookOptions,
  ): Promise<unknown> {
    return verifyWebhook(secret, headers, rawBody, options);
  }

  /**
   * Creates a transfer exactly once. The key (given, or minted before the
   * first attempt) and the body bytes are the same on every attempt, so a
   * retry after a timeout can never make a second transfer. Retries network
   * errors, timeouts, 408, 409, 429 and 5xx (honouring `Retry-After`); never
   * another 4xx. On failure the `PayrailError` carries the key.
   */
  async createTransfer(params: CreateTransferParams, options: CreateTransferOptions = {}): Promise<CreateTransferResult> {
    const idempotencyKey = options.idempotencyKey ?? PayrailClient.newIdempotencyKey();
    // Serialized once: every attempt sends these exact bytes.
    const body = JSON.stringify(params);
    const answer = await this.#send({ method: "POST", path: "/transfers", body, idempotencyKey, signal: options.signal });
    return {
      transfer: answer.body as Transfer,
      replayed: answer.headers.get("Idempotent-Replayed")?.trim().toLowerCase() === "true",
      idempotencyKey,
      requestId: answer.requestId,
    };
  }

  /** One of the client's transfers, as it is now; a `PayrailError` with status 404 when there is none. */
  async getTransfer(id: string, options: RequestOptions = {}): Promise<Transfer> {
    const answer = await this.#send({ method: "GET", path: `/transfers/${encodeURIComponent(id)}`, signal: options.signal });
    return answer.body as Transfer;
  }

  /** One page of the client's transfers, newest first. */
  async listTransfersPage(options: ListTransfersOptions = {}): Promise<TransferList> {
    const query = new URLSearchParams();
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    if (options.startingAfter !== undefined) query.set("starting_after", options.startingAfter);
    const qs = query.toString();
    const answer = await this.#send({ method: "GET", path: `/transfers${qs ? `?${qs}` : ""}`, signal: options.signal });
    return answer.body as TransferList;
  }

  /**
   * Every transfer of the client, newest first, fetching page after page
   * (`limit` per request) as the loop asks for more:
   * `for await (const t of client.listTransfers({ limit: 100 })) …`.
   */
  async *listTransfers(options: ListTransfersOptions = {}): AsyncGenerator<Transfer, void, undefined> {
    let startingAfter = options.startingAfter;
    for (;;) {
      const page = await this.listTransfersPage({ ...options, startingAfter });
      for (const transfer of page.data) yield transfer;
      const last = page.data[page.data.length - 1];
      if (!page.has_more || !last) return;
      startingAfter = last.id;
    }
  }

  async #send(request: SendOptions): Promise<Answer> {
    const url = this.baseUrl + request.path;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#apiKey}`,
      Accept: "application/json, application/problem+json",
    };
    if (request.body !== undefined) headers["Content-Type"] = "application/json";
    if (request.idempotencyKey !== undefined) headers["Idempotency-Key"] = request.idempotencyKey;
    const userSignal = request.signal;
    const base = { idempotencyKey: request.idempotencyKey };

    for (let attempt = 1; ; attempt++) {
      const aborted = () =>
        new PayrailError({
          ...base,
          type: "aborted",
          title: "Aborted",
          status: 0,
          detail: "the call was aborted by its signal",
          attempts: attempt,
          cause: userSignal?.reason,
        });
      if (userSignal?.aborted) throw aborted();

      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, this.timeoutMs);
      const onUserAbort = () => controller.abort();
      userSignal?.addEventListener("abort", onUserAbort, { once: true });

      let response: Response | undefined;
      let text = "";
      let failure: unknown;
      try {
        response = await this.#fetch(url, {
          method: request.method,
          headers,
          body: request.body,
          signal: controller.signal,
        });
        // The timeout covers the answer's body too.
        text = await response.text();
      } catch (err) {
        failure = err;
      } finally {
        clearTimeout(timer);
        userSignal?.removeEventListener("abort", onUserAbort);
      }
      if (userSignal?.aborted) throw aborted();

      let error: PayrailError;
      let waitMs: number | undefined;
      if (failure !== undefined || response === undefined) {
        error = new PayrailError({
          ...base,
          type: timedOut ? "timeout" : "network-error",
          title: timedOut ? "Timed out" : "Network error",
          status: 0,
          detail: timedOut
            ? `no complete answer within ${this.timeoutMs} ms`
            : String((failure as { message?: unknown })?.message ?? failure),
          attempts: attempt,
          cause: failure,
        });
      } else {
        const requestId = response.headers.get("X-Request-Id") ?? undefined;
        let body: unknown;
        let parsed = false;
        try {
          body = text === "" ? undefined : JSON.parse(text);
          parsed = true;
        } catch {
          /* not JSON */
        }
        if (response.ok) {
          if (parsed && body !== undefined) {
            return { status: response.status, headers: response.headers, body, requestId };
          }
          throw new PayrailError({
            ...base,
            type: "invalid-response",
            title: "Invalid response",
            status: response.status,
            detail: "the answer is not JSON",
            requestId,
            attempts: attempt,
          });
        }
        const retryAfterMs = parseRetryAfter(response.headers.get("Retry-After"));
        error = problemError(response, body, {
          ...base,
          requestId,
          attempts: attempt,
          retryAfter: retryAfterMs === undefined ? undefined : retryAfterMs / 1000,
        });
        waitMs = retryAfterMs;
      }

      if (!isRetryableStatus(error.status) || attempt > this.maxRetries) throw error;
      try {
        await sleep(waitMs ?? backoffDelayMs(attempt), userSignal);
      } catch {
        throw aborted();
      }
    }
  }
}

function problemError(
  response: Response,
  body: unknown,
  extra: { idempotencyKey?: string; requestId?: string; attempts: number; retryAfter?: number },
): PayrailError {
  const p = (body && typeof body === "object" ? body : {}) as Record<string, unknown>;
  const str = (v: unknown) => (typeof v === "string" ? v : undefined);
  return new PayrailError({
    ...extra,
    type: str(p.type) ?? "about:blank",
    title: str(p.title) ?? (response.statusText || `HTTP ${response.status}`),
    status: typeof p.status === "number" ? p.status : response.status,
    detail: str(p.detail) ?? "",
    errors: Array.isArray(p.errors) ? (p.errors as FieldError[]) : undefined,
  });
}
