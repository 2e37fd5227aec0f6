// The SDK's types against the server's own `GET /openapi.json`: every
// schema's property names, required fields and the status enum must be what
// the TypeScript side lists (src/types.ts), so the two cannot drift.
import assert from "node:assert/strict";
import { before, test } from "node:test";

import {
  CREATE_TRANSFER_FIELDS,
  CREATE_TRANSFER_REQUIRED,
  FIELD_ERROR_FIELDS,
  PROBLEM_FIELDS,
  TRANSFER_FIELDS,
  TRANSFER_LIST_FIELDS,
  TRANSFER_STATUSES,
  TRANSFER_EVENT_TYPES,
  ANOMALY_FIELDS,
} from "../src/index.js";
import { baseUrl } from "./helpers.js";

type Schema = {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  enum?: string[];
  items?: Schema;
  oneOf?: Schema[];
  anyOf?: Schema[];
  allOf?: Schema[];
};
let doc: { openapi: string; paths: Record<string, unknown>; components: { schemas: Record<string, Schema> } };

before(async () => {
  const res = await fetch(`${baseUrl()}/openapi.json`);
  assert.equal(res.status, 200);
  doc = (await res.json()) as typeof doc;
});

function schema(name: string): Schema {
  const s = doc.components.schemas[name];
  assert.ok(s, `components.schemas.${name} exists`);
  return s;
}

function resolve(s: Schema): Schema {
  if (s.$ref) return resolve(schema(s.$ref.replace("#/components/schemas/", "")));
  const inner = s.allOf ?? s.oneOf ?? s.anyOf;
  if (inner) {
    const concrete = inner.filter((x) => x.type !== "null");
    if (concrete.length === 1) return resolve(concrete[0]!);
  }
  return s;
}

const sorted = (xs: readonly string[]) => [...xs].sort();

test("the document is OpenAPI 3.1 with the transfer paths", () => {
  assert.match(doc.openapi, /^3\.1\./);
  assert.ok(doc.paths["/transfers"]);
  assert.ok(doc.paths["/transfers/{id}"]);
});

test("Transfer matches TransferView", () => {
  const s = schema("TransferView");
  assert.deepEqual(sorted(Object.keys(s.properties ?? {})), sorted(TRANSFER_FIELDS));
  assert.deepEqual(sorted(s.required ?? []), sorted(TRANSFER_FIELDS), "every field is always present");
  assert.deepEqual(sorted(resolve(s.properties!.status!).enum ?? []), sorted(TRANSFER_STATUSES));
});

test("Anomaly and the event types match", () => {
  const s = schema("Anomaly");
  assert.deepEqual(sorted(Object.keys(s.properties ?? {})), sorted(ANOMALY_FIELDS));
  assert.deepEqual(sorted(s.required ?? []), sorted(ANOMALY_FIELDS));
  assert.deepEqual(sorted(resolve(schema("EventType")).enum ?? []), sorted(TRANSFER_EVENT_TYPES));
});

test("CreateTransferParams matches CreateTransfer", () => {
  const s = schema("CreateTransfer");
  assert.deepEqual(sorted(Object.keys(s.properties ?? {})), sorted(CREATE_TRANSFER_FIELDS));
  assert.deepEqual(sorted(s.required ?? []), sorted(CREATE_TRANSFER_REQUIRED));
});

test("TransferList, Problem and FieldError match", () => {
  const list = schema("TransferList");
  assert.deepEqual(sorted(Object.keys(list.properties ?? {})), sorted(TRANSFER_LIST_FIELDS));
  assert.deepEqual(sorted(list.required ?? []), sorted(TRANSFER_LIST_FIELDS));
  const problem = schema("Problem");
  assert.deepEqual(sorted(Object.keys(problem.properties ?? {})), sorted(PROBLEM_FIELDS));
  assert.deepEqual(sorted(problem.required ?? []), sorted(PROBLEM_FIELDS.filter((f) => f !== "errors")));
  const fieldError = schema("FieldError");
  assert.deepEqual(sorted(Object.keys(fieldError.properties ?? {})), sorted(FIELD_ERROR_FIELDS));
});
