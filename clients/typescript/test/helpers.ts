import { PayrailClient, type FetchLike, type PayrailClientOptions } from "../src/index.js";

export function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests through scripts/with-payrail (npm test)`);
  return value;
}

export const baseUrl = () => env("PAYRAIL_URL");

export function client(options: Partial<PayrailClientOptions> = {}): PayrailClient {
  return new PayrailClient({ baseUrl: baseUrl(), apiKey: env("PAYRAIL_API_KEY"), ...options });
}

/** What one call to `fetch` sent. */
export interface Sent {
  url: string;
  method: string;
  idempotencyKey: string | null;
  body: string | undefined;
  at: number;
}

/** Real fetch, recording every call; `intercept` may answer a call itself. */
export function recordingFetch(
  intercept?: (call: number, input: string, init: RequestInit) => Promise<Response> | undefined,
): { fetch: FetchLike; calls: Sent[] } {
  const calls: Sent[] = [];
  const fetchImpl: FetchLike = (input, init) => {
    const headers = new Headers(init.headers);
    calls.push({
      url: input,
      method: init.method ?? "GET",
      idempotencyKey: headers.get("Idempotency-Key"),
      body: init.body as string | undefined,
      at: Date.now(),
    });
    const answered = intercept?.(calls.length, input, init);
    return answered ?? fetch(input, init);
  };
  return { fetch: fetchImpl, calls };
}

let counter = 0;
/** A valid transfer body, distinct per call. */
export function transferParams(amount = 1000 + ++counter) {
  return {
    amount,
    currency: "USD",
    source_account: "acc_alice",
    destination_account: "acc_bob",
    description: `sdk test ${counter}`,
    metadata: { order: `T-${counter}` },
  };
}

export function problemResponse(status: number, slug: string, retryAfter?: string): Response {
  const headers: Record<string, string> = { "Content-Type": "application/problem+json" };
  if (retryAfter !== undefined) headers["Retry-After"] = retryAfter;
  return new Response(JSON.stringify({ type: `/problems/${slug}`, title: slug, status, detail: "synthetic" }), {
    status,
    headers,
  });
}

/** Every transfer of the client created under `key`. */
export async function transfersWithKey(c: PayrailClient, key: string) {
  const found = [];
  for await (const t of c.listTransfers({ limit: 100 })) if (t.idempotency_key === key) found.push(t);
  return found;
}
