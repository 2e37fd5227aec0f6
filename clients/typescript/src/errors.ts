import type { FieldError } from "./types.js";

/**
 * A request that did not succeed: the server's problem (RFC 9457), or, with
 * `status` 0, a network failure or timeout on the last attempt.
 *
 * `idempotencyKey` is set for `createTransfer`: keep it with the payment
 * intent and retry the same intent later with the same key and the same
 * parameters (when `retryable` is true); a new key would make a new transfer.
 */
export class PayrailError extends Error {
  /** `/problems/<slug>` from the server, or `network-error` / `timeout` (status 0). */
  readonly type: string;
  readonly title: string;
  /** The HTTP status; 0 when no answer arrived. */
  readonly status: number;
  readonly detail: string;
  /** The broken rules of a `validation-failed` problem. */
  readonly errors: FieldError[] | undefined;
  /** The Idempotency-Key of the `createTransfer` call, to retry the same intent. */
  readonly idempotencyKey: string | undefined;
  /** `X-Request-Id` of the answer, to find the server's log line. */
  readonly requestId: string | undefined;
  /** Seconds from `Retry-After`, when the server sent one. */
  readonly retryAfter: number | undefined;
  /** How many attempts were made. */
  readonly attempts: number;

  constructor(init: {
    type: string;
    title: string;
    status: number;
    detail: string;
    errors?: FieldError[];
    idempotencyKey?: string;
    requestId?: string;
    retryAfter?: number;
    attempts: number;
    cause?: unknown;
  }) {
    super(init.detail ? `${init.title}: ${init.detail}` : init.title);
    this.name = "PayrailError";
    this.type = init.type;
    this.title = init.title;
    this.status = init.status;
    this.detail = init.detail;
    this.errors = init.errors;
    this.idempotencyKey = init.idempotencyKey;
    this.requestId = init.requestId;
    this.retryAfter = init.retryAfter;
    this.attempts = init.attempts;
    if (init.cause !== undefined) {
      Object.defineProperty(this, "cause", { value: init.cause, enumerable: false, writable: true, configurable: true });
    }
  }

  /** The problem type's slug (`validation-failed`, …). */
  get slug(): string {
    return this.type.replace(/^.*\/problems\//, "");
  }

  /**
   * True when the same request may succeed later with the same key: network
   * errors, timeouts, 408, 409, 429 and 5xx. Other 4xx need a changed request.
   */
  get retryable(): boolean {
    return isRetryableStatus(this.status);
  }
}

/** Network errors and timeouts (status 0), 408, 409, 429 and 5xx. */
export function isRetryableStatus(status: number): boolean {
  return status === 0 || status === 408 || status === 409 || status === 429 || status >= 500;
}

/** A webhook whose signature, timestamp or headers do not check out. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}
