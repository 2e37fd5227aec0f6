export {
  PayrailClient,
  backoffDelayMs,
  parseRetryAfter,
  type CreateTransferOptions,
  type CreateTransferResult,
  type FetchLike,
  type ListTransfersOptions,
  type PayrailClientOptions,
  type RequestOptions,
} from "./client.js";
export { PayrailError, WebhookVerificationError, isRetryableStatus } from "./errors.js";
export { verifyWebhook, signWebhook, type VerifyWebhookOptions, type WebhookHeaders } from "./webhook.js";
export * from "./types.js";
