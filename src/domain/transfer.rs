use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::{AccountId, Amount, ClientId, Currency, IdempotencyKey};

/// Longest description, in characters.
pub const DESCRIPTION_LEN_MAX: usize = 140;
/// Most metadata entries.
pub const METADATA_ENTRIES_MAX: usize = 20;
/// Longest metadata key, in characters.
pub const METADATA_KEY_LEN_MAX: usize = 40;
/// Longest metadata value, in characters.
pub const METADATA_VALUE_LEN_MAX: usize = 500;

/// One broken body rule, reported to the caller as `{"field", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// The JSON field (dotted for nested ones, e.g. `metadata.order`).
    pub field: String,
    /// What the rule is.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Free text of at most 140 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description(String);

impl Description {
    /// Accepts at most 140 characters (Unicode scalar values, not bytes).
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.chars().count() > DESCRIPTION_LEN_MAX {
            return Err(format!("must be at most {DESCRIPTION_LEN_MAX} characters"));
        }
        if raw.contains('\0') {
            return Err("must not contain U+0000".into());
        }
        Ok(Self(raw.to_owned()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// At most 20 string→string entries, keys 1–40 and values up to 500
/// characters. Kept sorted so that its canonical form does not depend on the
/// order the client sent it in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata(BTreeMap<String, String>);

impl Metadata {
    /// Validates a JSON object; every broken entry is reported.
    pub fn parse(raw: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        if raw.len() > METADATA_ENTRIES_MAX {
            errors.push(FieldError::new(
                "metadata",
                format!("must have at most {METADATA_ENTRIES_MAX} entries"),
            ));
        }
        let mut entries = BTreeMap::new();
        for (key, value) in raw {
            let field = format!("metadata.{key}");
            let key_len = key.chars().count();
            if key.contains('\0') {
                errors.push(FieldError::new(&field, "keys must not contain U+0000"));
            }
            if key_len == 0 || key_len > METADATA_KEY_LEN_MAX {
                errors.push(FieldError::new(
                    &field,
                    format!("keys must be 1 to {METADATA_KEY_LEN_MAX} characters"),
                ));
            }
            match value {
                Value::String(s) if s.contains('\0') => {
                    errors.push(FieldError::new(&field, "values must not contain U+0000"))
                }
                Value::String(s) if s.chars().count() <= METADATA_VALUE_LEN_MAX => {
                    entries.insert(key.clone(), s.clone());
                }
                Value::String(_) => errors.push(FieldError::new(
                    &field,
                    format!("values must be at most {METADATA_VALUE_LEN_MAX} characters"),
                )),
                _ => errors.push(FieldError::new(&field, "values must be strings")),
            }
        }
        if errors.is_empty() {
            Ok(Self(entries))
        } else {
            Err(errors)
        }
    }

    /// Rebuilds metadata read back from Postgres, where only parsed values are stored.
    pub fn from_trusted(entries: BTreeMap<String, String>) -> Self {
        Self(entries)
    }

    /// The entries, sorted by key.
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

/// A valid `POST /transfers` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTransfer {
    /// Amount in minor units.
    pub amount: Amount,
    /// Currency of the amount.
    pub currency: Currency,
    /// Account debited.
    pub source_account: AccountId,
    /// Account credited; never equal to `source_account`.
    pub destination_account: AccountId,
    /// Optional free text.
    pub description: Option<Description>,
    /// Optional client data, empty when absent.
    pub metadata: Metadata,
}

/// The fields a `POST /transfers` body may have; any other is rejected.
pub const FIELDS: [&str; 6] = [
    "amount",
    "currency",
    "source_account",
    "destination_account",
    "description",
    "metadata",
];

impl NewTransfer {
    /// Validates a decoded JSON object against docs/API.md's body rules and
    /// returns every broken rule, not just the first.
    pub fn parse(body: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        for unknown in body.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
            errors.push(FieldError::new(unknown.as_str(), "unknown field"));
        }
        let amount = keep(
            &mut errors,
            "amount",
            required(body, "amount").and_then(|v| {
                // `as_i64` is None for floats (1.0 too) and for integers past i64.
                v.as_i64()
                    .ok_or_else(|| "must be an integer".to_owned())
                    .and_then(Amount::parse)
            }),
        );
        let currency = keep(
            &mut errors,
            "currency",
            required_str(body, "currency").and_then(Currency::parse),
        );
        let source = keep(
            &mut errors,
            "source_account",
            required_str(body, "source_account").and_then(AccountId::parse),
        );
        let destination = keep(
            &mut errors,
            "destination_account",
            required_str(body, "destination_account").and_then(AccountId::parse),
        );
        let description = keep(
            &mut errors,
            "description",
            match body.get("description") {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Description::parse(s).map(Some),
                Some(_) => Err("must be a string or null".to_owned()),
            },
        );
        let metadata = match body.get("metadata") {
            None | Some(Value::Null) => Some(Metadata::default()),
            Some(Value::Object(m)) => Metadata::parse(m).map_err(|e| errors.extend(e)).ok(),
            Some(_) => {
                errors.push(FieldError::new("metadata", "must be an object of strings"));
                None
            }
        };
        if let (Some(s), Some(d)) = (&source, &destination) {
            if s == d {
                errors.push(FieldError::new(
                    "destination_account",
                    "must differ from source_account",
                ));
            }
        }
        match (amount, currency, source, destination, description, metadata) {
            (
                Some(amount),
                Some(currency),
                Some(source_account),
                Some(destination_account),
                Some(description),
                Some(metadata),
            ) if errors.is_empty() => Ok(Self {
                amount,
                currency,
                source_account,
                destination_account,
                description,
                metadata,
            }),
            _ => Err(errors),
        }
    }
}

/// Keeps a field's value, or records why it was rejected.
fn keep<T>(errors: &mut Vec<FieldError>, field: &str, result: Result<T, String>) -> Option<T> {
    result
        .map_err(|m| errors.push(FieldError::new(field, m)))
        .ok()
}

fn required<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a Value, String> {
    match body.get(field) {
        None | Some(Value::Null) => Err("is required".to_owned()),
        Some(v) => Ok(v),
    }
}

fn required_str<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    required(body, field)?
        .as_str()
        .ok_or_else(|| "must be a string".to_owned())
}

/// Where a transfer is in its life. The only changes: `pending` to
/// `processing`, `succeeded` or `failed`; `processing` to `succeeded` or
/// `failed`; `succeeded` to `returned` ([`TransferStatus::may_become`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TransferStatus {
    /// Accepted here, not yet accepted by the provider.
    Pending,
    /// Accepted by the provider, its outcome not yet known.
    Processing,
    /// The provider executed it.
    Succeeded,
    /// The provider declined it or rejected it permanently.
    Failed,
    /// It succeeded and the money came back later (the receiving bank
    /// bounced it).
    Returned,
}

impl TransferStatus {
    /// Every status, in the order of a transfer's life.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Processing,
        Self::Succeeded,
        Self::Failed,
        Self::Returned,
    ];

    /// The name stored in Postgres and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Returned => "returned",
        }
    }

    /// True once the provider decided (`succeeded`, `failed`, `returned`).
    /// Only `succeeded` changes again after that, to `returned`.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Pending | Self::Processing)
    }

    /// Whether a transfer in this status may change to `next`.
    pub fn may_become(self, next: Self) -> bool {
        use TransferStatus::*;
        matches!(
            (self, next),
            (Pending, Processing | Succeeded | Failed)
                | (Processing, Succeeded | Failed)
                | (Succeeded, Returned)
        )
    }

    /// The statuses a transfer may have just before it becomes `self`:
    /// [`Self::may_become`] read backwards, in the order of a transfer's
    /// life. Empty for `pending`, which only a creation makes.
    pub fn allowed_before(self) -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(move |s| s.may_become(self))
    }

    /// Parses the stored name.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// A transfer as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// UUID v7: time-ordered, so the primary key index stays append-mostly.
    pub id: Uuid,
    /// The tenant that owns it.
    pub client_id: ClientId,
    /// The key it was created under.
    pub idempotency_key: IdempotencyKey,
    /// Current status.
    pub status: TransferStatus,
    /// What was asked for.
    pub request: NewTransfer,
    /// When it was accepted (microsecond precision, as Postgres keeps it).
    pub created_at: DateTime<Utc>,
    /// When its status last changed.
    pub updated_at: DateTime<Utc>,
    /// The provider's reference once it succeeded.
    pub provider_reference: Option<String>,
    /// Why it failed, once it failed.
    pub failure_reason: Option<String>,
    /// Status changes so far (0 while `pending`); the `sequence` of the
    /// event of its latest change.
    pub status_sequence: i32,
    /// Why the money came back, once `returned`.
    pub return_reason: Option<String>,
    /// When it was returned.
    pub returned_at: Option<DateTime<Utc>>,
    /// Provider reports that contradicted a final status, oldest first
    /// (read with the transfer by id; empty elsewhere).
    pub anomalies: Vec<Anomaly>,
}

/// A provider report that contradicted the transfer's final status. It
/// changed nothing and is kept for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Anomaly {
    /// The transfer's status when the report came.
    pub status_then: TransferStatus,
    /// What the provider reported: `processing`, `succeeded`, `declined` or
    /// `returned`.
    pub reported: String,
    /// The reference the report carried.
    #[schema(required = true)]
    pub reference: Option<String>,
    /// The reason the report carried.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// `relay`, `notification` or `poll`.
    pub source: String,
    /// RFC 3339, UTC.
    #[schema(format = DateTime)]
    pub reported_at: String,
}

impl Transfer {
    /// A new pending transfer accepted now.
    pub fn accept(
        client_id: ClientId,
        idempotency_key: IdempotencyKey,
        request: NewTransfer,
    ) -> Self {
        let now = now_micros();
        Self {
            id: Uuid::now_v7(),
            client_id,
            idempotency_key,
            status: TransferStatus::Pending,
            request,
            created_at: now,
            updated_at: now,
            provider_reference: None,
            failure_reason: None,
            status_sequence: 0,
            return_reason: None,
            returned_at: None,
            anomalies: Vec::new(),
        }
    }
}

/// The current time truncated to microseconds, so that a timestamp shown in a
/// creation answer reads back identically from Postgres.
pub fn now_micros() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now)
}

/// The public JSON form of a transfer (docs/API.md), shared by the creation
/// answer and `GET`, so both serialize the same way. Every field is always
/// present; the optional ones are `null` when unset.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TransferView {
    /// Transfer id (UUID v7).
    pub id: Uuid,
    /// `pending`, `processing`, `succeeded`, `failed` or `returned`.
    pub status: TransferStatus,
    /// Amount in minor units.
    #[schema(minimum = 1, maximum = 999_999_999_999_i64)]
    pub amount: i64,
    /// ISO 4217 code.
    #[schema(pattern = "^[A-Z]{3}$", example = "USD")]
    pub currency: String,
    /// Account debited.
    #[schema(pattern = "^[A-Za-z0-9_.:-]{1,64}$")]
    pub source_account: String,
    /// Account credited.
    #[schema(pattern = "^[A-Za-z0-9_.:-]{1,64}$")]
    pub destination_account: String,
    /// Free text or null.
    #[schema(required = true, max_length = 140)]
    pub description: Option<String>,
    /// Client data (`{}` when none was given).
    pub metadata: BTreeMap<String, String>,
    /// The idempotency key it was created under (unquoted).
    #[schema(pattern = "^[!-~]{1,255}$")]
    pub idempotency_key: String,
    /// RFC 3339, UTC.
    #[schema(format = DateTime, example = "2025-01-31T12:00:00.000000Z")]
    pub created_at: String,
    /// RFC 3339, UTC.
    #[schema(format = DateTime, example = "2025-01-31T12:00:00.000000Z")]
    pub updated_at: String,
    /// The provider's reference once succeeded, else null.
    #[schema(required = true)]
    pub provider_reference: Option<String>,
    /// Why it failed, else null.
    #[schema(required = true)]
    pub failure_reason: Option<String>,
    /// Why the money came back, once `returned`, else null.
    #[schema(required = true)]
    pub return_reason: Option<String>,
    /// When it was returned (RFC 3339, UTC), else null.
    #[schema(required = true, format = DateTime)]
    pub returned_at: Option<String>,
    /// Provider reports that contradicted a final status and changed
    /// nothing (shown by `GET /transfers/{id}`; `[]` elsewhere).
    pub anomalies: Vec<Anomaly>,
}

impl From<&Transfer> for TransferView {
    fn from(t: &Transfer) -> Self {
        let ts = |at: DateTime<Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        Self {
            id: t.id,
            status: t.status,
            amount: t.request.amount.minor_units(),
            currency: t.request.currency.code().to_owned(),
            source_account: t.request.source_account.as_str().to_owned(),
            destination_account: t.request.destination_account.as_str().to_owned(),
            description: t
                .request
                .description
                .as_ref()
                .map(|d| d.as_str().to_owned()),
            metadata: t.request.metadata.entries().clone(),
            idempotency_key: t.idempotency_key.as_str().to_owned(),
            created_at: ts(t.created_at),
            updated_at: ts(t.updated_at),
            provider_reference: t.provider_reference.clone(),
            failure_reason: t.failure_reason.clone(),
            return_reason: t.return_reason.clone(),
            returned_at: t.returned_at.map(ts),
            anomalies: t.anomalies.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<NewTransfer, Vec<FieldError>> {
        NewTransfer::parse(v.as_object().unwrap())
    }

    fn fields(v: Value) -> Vec<String> {
        parse(v).unwrap_err().into_iter().map(|e| e.field).collect()
    }

    fn valid() -> Value {
        json!({"amount": 1500, "currency": "JPY", "source_account": "acc_a", "destination_account": "acc_b"})
    }

    #[test]
    fn a_minimal_body_is_valid() {
        let t = parse(valid()).unwrap();
        assert_eq!(t.amount.minor_units(), 1500);
        assert_eq!(t.description, None);
        assert!(t.metadata.entries().is_empty());
    }

    #[test]
    fn every_broken_rule_is_reported() {
        let got = fields(
            json!({"amount": 1.5, "currency": "usd", "source_account": "a b",
            "destination_account": "", "description": 3, "metadata": {"k": 1}, "extra": true}),
        );
        for f in [
            "extra",
            "amount",
            "currency",
            "source_account",
            "destination_account",
            "description",
            "metadata.k",
        ] {
            assert!(got.contains(&f.to_owned()), "{f} missing from {got:?}");
        }
    }

    #[test]
    fn required_fields_must_be_present() {
        assert_eq!(
            fields(json!({})),
            [
                "amount",
                "currency",
                "source_account",
                "destination_account"
            ]
        );
    }

    #[test]
    fn amounts_must_be_integers_in_range() {
        for bad in [
            json!(0),
            json!(-1),
            json!(1.0),
            json!("100"),
            json!(1_000_000_000_000i64),
            json!(u64::MAX),
        ] {
            let mut b = valid();
            b["amount"] = bad.clone();
            assert_eq!(fields(b), ["amount"], "{bad}");
        }
    }

    #[test]
    fn accounts_must_differ() {
        let mut b = valid();
        b["destination_account"] = json!("acc_a");
        assert_eq!(fields(b), ["destination_account"]);
    }

    #[test]
    fn description_and_metadata_limits_hold() {
        let mut b = valid();
        b["description"] = json!("é".repeat(140));
        b["metadata"] = json!((0..20)
            .map(|i| (format!("k{i}"), json!("v".repeat(500))))
            .collect::<Map<_, _>>());
        assert!(parse(b.clone()).is_ok());
        b["description"] = json!("é".repeat(141));
        assert_eq!(fields(b), ["description"]);

        let mut b = valid();
        b["metadata"] = json!((0..21)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect::<Map<_, _>>());
        assert_eq!(fields(b), ["metadata"]);
        let mut b = valid();
        b["metadata"] = json!({"k".repeat(41): "v", "": "v", "ok": "v".repeat(501)});
        assert_eq!(fields(b).len(), 3);
    }

    #[test]
    fn statuses_only_move_forward() {
        use TransferStatus::*;
        let allowed: Vec<(TransferStatus, TransferStatus)> = TransferStatus::ALL
            .into_iter()
            .flat_map(|a| TransferStatus::ALL.map(|b| (a, b)))
            .filter(|(a, b)| a.may_become(*b))
            .collect();
        assert_eq!(
            allowed,
            [
                (Pending, Processing),
                (Pending, Succeeded),
                (Pending, Failed),
                (Processing, Succeeded),
                (Processing, Failed),
                (Succeeded, Returned),
            ]
        );
        for s in TransferStatus::ALL {
            assert_eq!(TransferStatus::parse(s.as_str()), Some(s));
        }
        assert!(!Processing.is_final() && Returned.is_final());
    }

    #[test]
    fn null_optional_fields_mean_absent() {
        let mut b = valid();
        b["description"] = Value::Null;
        b["metadata"] = Value::Null;
        assert_eq!(parse(b).unwrap(), parse(valid()).unwrap());
    }
}
