// The API's shapes, as served in `GET /openapi.json`. The field lists below
// are checked against that document by the test suite (test/openapi.test.ts),
// and the `Exhaustive` checks make the compiler keep them in step with the
// interfaces, so the two sides cannot drift apart silently.

/**
 * A transfer's state. `pending` until the provider accepts it; `processing`
 * while the provider has accepted it and not decided; then `succeeded` or
 * `failed`. A `succeeded` transfer may still become `returned` (the
 * receiving bank sent the money back). Nothing else ever changes.
 */
export type TransferStatus = "pending" | "processing" | "succeeded" | "failed" | "returned";

/** Every value of {@link TransferStatus}. */
export const TRANSFER_STATUSES = ["pending", "processing", "succeeded", "failed", "returned"] as const satisfies readonly TransferStatus[];

/** True once the provider decided (`succeeded`, `failed`, `returned`). */
export function isDecided(status: TransferStatus): boolean {
  return status !== "pending" && status !== "processing";
}

/** The webhook event of each status change (`EventType`). */
export type TransferEventType = "transfer.processing" | "transfer.succeeded" | "transfer.failed" | "transfer.returned";

/** Every value of {@link TransferEventType}. */
export const TRANSFER_EVENT_TYPES = [
  "transfer.processing",
  "transfer.succeeded",
  "transfer.failed",
  "transfer.returned",
] as const satisfies readonly TransferEventType[];

/** A webhook event's body. Order a transfer's events by `data.sequence`: deliveries may arrive out of order. */
export interface TransferEvent {
  /** `evt_<uuid>`, also the `webhook-id` header: deduplicate on it. */
  id: string;
  type: TransferEventType;
  /** RFC 3339, UTC: when the status changed. */
  created_at: string;
  data: {
    object: Transfer;
    /** 1 for a transfer's first change, then 2, 3, … */
    sequence: number;
  };
}

/** A provider report that contradicted a decided status; it changed nothing (`Anomaly`). */
export interface Anomaly {
  /** The transfer's status when the report came. */
  status_then: TransferStatus;
  /** `processing`, `succeeded`, `declined` or `returned`. */
  reported: string;
  reference: string | null;
  reason: string | null;
  /** `relay`, `notification` or `poll`. */
  source: string;
  /** RFC 3339, UTC. */
  reported_at: string;
}

/** A transfer, as `POST /transfers` and `GET /transfers/{id}` answer it (`TransferView`). */
export interface Transfer {
  /** UUID (v7: ids sort by creation time). */
  id: string;
  status: TransferStatus;
  /** Minor units of the currency (cents for USD, yen for JPY). */
  amount: number;
  /** ISO 4217 code, upper case. */
  currency: string;
  source_account: string;
  destination_account: string;
  description: string | null;
  /** `{}` when none was given. */
  metadata: Record<string, string>;
  /** The key the transfer was created under (unquoted). */
  idempotency_key: string;
  /** RFC 3339, UTC. */
  created_at: string;
  /** RFC 3339, UTC. */
  updated_at: string;
  /** Set once the provider executed it. */
  provider_reference: string | null;
  /** Set when it failed. */
  failure_reason: string | null;
  /** Set once `returned`. */
  return_reason: string | null;
  /** RFC 3339, UTC; set once `returned`. */
  returned_at: string | null;
  /** Reports that contradicted its decided status (`GET /transfers/{id}`; `[]` elsewhere). */
  anomalies: Anomaly[];
}

/** The body of `POST /transfers` (`CreateTransfer`). Unknown fields are refused. */
export interface CreateTransferParams {
  /** 1 to 999 999 999 999, an integer, in minor units. */
  amount: number;
  /** An active ISO 4217 code, upper case: `USD`, `EUR`, `JPY`, … */
  currency: string;
  /** 1–64 characters of `A-Z a-z 0-9 _ . : -`. */
  source_account: string;
  /** Same rule; must differ from `source_account`. */
  destination_account: string;
  /** At most 140 characters. */
  description?: string | null;
  /** At most 20 string → string entries (keys ≤ 40, values ≤ 500 characters). */
  metadata?: Record<string, string> | null;
}

/** One page of `GET /transfers` (`TransferList`). */
export interface TransferList {
  /** Newest first. */
  data: Transfer[];
  /** True when older transfers follow. */
  has_more: boolean;
}

/** One broken rule of a `422 validation-failed` problem (`FieldError`). */
export interface FieldError {
  field: string;
  message: string;
}

/** An `application/problem+json` error body (RFC 9457) (`Problem`). */
export interface Problem {
  /** `/problems/<slug>`. */
  type: string;
  title: string;
  status: number;
  detail: string;
  /** The broken rules, for `validation-failed`. */
  errors?: FieldError[];
}

/** Compiles only when `L` names every key of `T`. */
type Exhaustive<T, L extends readonly (keyof T)[]> = Exclude<keyof T, L[number]> extends never ? L : never;

function fields<T>() {
  return <const L extends readonly (keyof T)[]>(list: Exhaustive<T, L>): L => list;
}

/** Every field of {@link Transfer}, in the server's order. */
export const TRANSFER_FIELDS = fields<Transfer>()([
  "id",
  "status",
  "amount",
  "currency",
  "source_account",
  "destination_account",
  "description",
  "metadata",
  "idempotency_key",
  "created_at",
  "updated_at",
  "provider_reference",
  "failure_reason",
  "return_reason",
  "returned_at",
  "anomalies",
]);

/** Every field of {@link Anomaly}. */
export const ANOMALY_FIELDS = fields<Anomaly>()(["status_then", "reported", "reference", "reason", "source", "reported_at"]);

/** Every field of {@link CreateTransferParams}. */
export const CREATE_TRANSFER_FIELDS = fields<CreateTransferParams>()([
  "amount",
  "currency",
  "source_account",
  "destination_account",
  "description",
  "metadata",
]);

/** The fields {@link CreateTransferParams} requires. */
export const CREATE_TRANSFER_REQUIRED = ["amount", "currency", "source_account", "destination_account"] as const;

/** Every field of {@link TransferList}. */
export const TRANSFER_LIST_FIELDS = fields<TransferList>()(["data", "has_more"]);

/** Every field of {@link Problem}. */
export const PROBLEM_FIELDS = fields<Problem>()(["type", "title", "status", "detail", "errors"]);

/** Every field of {@link FieldError}. */
export const FIELD_ERROR_FIELDS = fields<FieldError>()(["field", "message"]);
