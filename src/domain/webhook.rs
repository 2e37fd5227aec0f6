//! Webhook values that are valid by construction: endpoint URLs that passed
//! the address policy, signing secrets, event types and event bodies, and
//! the Standard Webhooks 1.0 signature.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use uuid::Uuid;

use super::{Transfer, TransferStatus, TransferView};

/// Longest endpoint URL, in bytes.
pub const ENDPOINT_URL_LEN_MAX: usize = 2048;
/// Longest endpoint description, in characters.
pub const ENDPOINT_DESCRIPTION_LEN_MAX: usize = 140;
/// Most live endpoints per client, by default (`--webhook-endpoints-max`).
pub const ENDPOINTS_PER_CLIENT_DEFAULT: i64 = 10;
/// Bytes of randomness in a signing secret.
pub const SECRET_BYTES: usize = 32;
/// How every secret's text starts.
pub const SECRET_PREFIX: &str = "whsec_";
/// How every event id's text starts.
pub const EVENT_ID_PREFIX: &str = "evt_";

/// Whether URLs naming loopback, private or link-local addresses are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressPolicy {
    /// Only public addresses (production).
    PublicOnly,
    /// Any address (`--webhook-allow-private`: tests and `payrail dev`).
    AllowPrivate,
}

impl AddressPolicy {
    /// Whether a receiver at `ip` may be called.
    pub fn allows(self, ip: IpAddr) -> bool {
        self == Self::AllowPrivate || !is_internal(ip)
    }
}

/// Addresses that reach this host or its private network: a webhook URL
/// must not turn the engine into a proxy into them (SSRF).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal_v4(v4),
            None => is_internal_v6(v6),
        },
    }
}

/// Everything but the global unicast space: a receiver is somebody else's
/// public server, so any range reserved for a special purpose is refused.
fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        // 100.64.0.0/10, carrier-grade NAT: private in all but name.
        || (a == 100 && (64..128).contains(&b))
        // 192.0.0.0/24, IETF protocol assignments.
        || (a == 192 && b == 0 && c == 0)
        // Documentation: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24.
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        // 198.18.0.0/15, benchmarking: labs and internal test networks.
        || (a == 198 && (b == 18 || b == 19))
        // 240.0.0.0/4, reserved (the broadcast address is in it too).
        || a >= 240
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // ::/96, IPv4-compatible (deprecated): ::a.b.c.d reaches a.b.c.d
        // on some stacks.
        || s[..6] == [0; 6]
        // 64:ff9b::/96 and 64:ff9b:1::/48, NAT64: a gateway turns them into
        // any IPv4 address, internal ones included.
        || (s[0] == 0x64 && s[1] == 0xff9b)
        // 2002::/16 (6to4) and 2001::/32 (Teredo) carry an IPv4 address too.
        || s[0] == 0x2002
        || (s[0] == 0x2001 && s[1] == 0)
        // 2001:db8::/32, documentation; 100::/64, discard.
        || (s[0] == 0x2001 && s[1] == 0xdb8)
        || (s[0] == 0x100 && s[1..4] == [0; 3])
        // fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local.
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
}

/// An `http` or `https` URL without credentials whose host, if it is an
/// address or `localhost`, the policy allows. Host names are checked again
/// against the policy each time they are resolved for a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl(url::Url);

impl EndpointUrl {
    /// Parses and checks `raw`; the error says what is wrong, for `url`.
    pub fn parse(raw: &str, policy: AddressPolicy) -> Result<Self, String> {
        if raw.len() > ENDPOINT_URL_LEN_MAX {
            return Err(format!("must be at most {ENDPOINT_URL_LEN_MAX} bytes"));
        }
        let url = url::Url::parse(raw).map_err(|e| format!("must be an absolute URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err("must be an http or https URL".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("must not carry credentials".into());
        }
        let refused = "must not name a loopback, private or link-local address";
        match url.host() {
            None => return Err("must name a host".into()),
            Some(url::Host::Ipv4(ip)) if !policy.allows(ip.into()) => return Err(refused.into()),
            Some(url::Host::Ipv6(ip)) if !policy.allows(ip.into()) => return Err(refused.into()),
            Some(url::Host::Domain(name))
                if policy == AddressPolicy::PublicOnly
                    && (name == "localhost" || name.ends_with(".localhost")) =>
            {
                return Err(refused.into())
            }
            Some(_) => {}
        }
        Ok(Self(url))
    }

    /// Rebuilds a URL read back from Postgres, where only parsed ones are stored.
    pub fn from_trusted(raw: &str) -> Option<Self> {
        url::Url::parse(raw).ok().map(Self)
    }

    /// The URL.
    pub fn as_url(&self) -> &url::Url {
        &self.0
    }

    /// The URL's text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// A Standard Webhooks signing secret: 32 random bytes, shown as
/// `whsec_<base64>`.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret([u8; SECRET_BYTES]);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    /// A new secret from the operating system's CSPRNG.
    pub fn generate() -> Self {
        use rand::RngCore;
        let mut bytes = [0u8; SECRET_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(bytes)
    }

    /// Reads `whsec_<base64 of 32 bytes>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| format!("must start with {SECRET_PREFIX}"))?;
        let bytes = BASE64
            .decode(encoded)
            .map_err(|e| format!("is not base64: {e}"))?;
        let bytes: [u8; SECRET_BYTES] = bytes
            .try_into()
            .map_err(|_| format!("must encode {SECRET_BYTES} bytes"))?;
        Ok(Self(bytes))
    }

    /// `whsec_<base64>`.
    pub fn encode(&self) -> String {
        format!("{SECRET_PREFIX}{}", BASE64.encode(self.0))
    }

    /// `v1,<base64 of HMAC-SHA256 over "{id}.{timestamp}.{body}">`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }

    /// Whether `header` (space-separated `v1,<sig>` entries) holds a valid
    /// signature by this secret; compared in constant time.
    pub fn verify(&self, header: &str, id: &str, timestamp: i64, body: &[u8]) -> bool {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        header
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|sig| BASE64.decode(sig).ok())
            .any(|sig| mac.clone().verify_slice(&sig).is_ok())
    }
}

/// `webhook-signature`: one entry per secret (the new one first during a
/// rotation), space-separated as Standard Webhooks allows.
pub fn signature_header(
    secrets: &[&WebhookSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    assert!(!secrets.is_empty(), "a delivery is signed with a secret");
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What an event says: one type per status a transfer can change to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum EventType {
    /// The provider accepted a transfer; its outcome comes later.
    #[serde(rename = "transfer.processing")]
    TransferProcessing,
    /// A transfer succeeded at the provider.
    #[serde(rename = "transfer.succeeded")]
    TransferSucceeded,
    /// A transfer failed at the provider.
    #[serde(rename = "transfer.failed")]
    TransferFailed,
    /// A transfer that succeeded came back.
    #[serde(rename = "transfer.returned")]
    TransferReturned,
}

impl EventType {
    /// Every type, for parsing and documentation.
    pub const ALL: [Self; 4] = [
        Self::TransferProcessing,
        Self::TransferSucceeded,
        Self::TransferFailed,
        Self::TransferReturned,
    ];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TransferProcessing => "transfer.processing",
            Self::TransferSucceeded => "transfer.succeeded",
            Self::TransferFailed => "transfer.failed",
            Self::TransferReturned => "transfer.returned",
        }
    }

    /// The type named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The event of a change to `status`; none for `pending`, which is
    /// where a transfer starts, not a change.
    pub fn of_status(status: TransferStatus) -> Option<Self> {
        match status {
            TransferStatus::Pending => None,
            TransferStatus::Processing => Some(Self::TransferProcessing),
            TransferStatus::Succeeded => Some(Self::TransferSucceeded),
            TransferStatus::Failed => Some(Self::TransferFailed),
            TransferStatus::Returned => Some(Self::TransferReturned),
        }
    }
}

/// `evt_<uuid>`, the event id receivers deduplicate on.
pub fn event_id_text(id: Uuid) -> String {
    format!("{EVENT_ID_PREFIX}{id}")
}

/// Reads `evt_<uuid>`.
pub fn parse_event_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text.strip_prefix(EVENT_ID_PREFIX)?).ok()
}

/// The smallest UUID v7 of the millisecond `at`: every event id made at
/// or after `at` sorts at or above it (Postgres compares uuids byte by
/// byte, and a v7 id starts with its Unix milliseconds), so "older than"
/// is a range of the id index and needs no index of its own.
pub fn event_id_floor(at: std::time::SystemTime) -> Uuid {
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // Its counter and random bits all zero: the least id of that millisecond.
    let floor = uuid::Builder::from_unix_timestamp_millis(ms, &[0; 10]).into_uuid();
    debug_assert_eq!(floor.get_version_num(), 7);
    floor
}

/// An event about to be written: its id, type and the exact body every
/// delivery attempt sends.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// UUID v7, so a client's events sort by time.
    pub id: Uuid,
    /// The transfer's owner.
    pub client_id: Uuid,
    /// The transfer it is about.
    pub transfer_id: Uuid,
    /// What happened.
    pub kind: EventType,
    /// When (the status change's time).
    pub created_at: DateTime<Utc>,
    /// `{"id","type","created_at","data":{"object":<transfer>,"sequence":n}}`.
    pub body: String,
}

#[derive(Serialize)]
struct EventBody<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: EventType,
    created_at: String,
    data: EventData<'a>,
}

#[derive(Serialize)]
struct EventData<'a> {
    object: &'a TransferView,
    /// The transfer's status changes so far, this one included: receivers
    /// order a transfer's events by it.
    sequence: i32,
}

impl NewEvent {
    /// The event of a transfer whose status has just changed.
    pub fn of_change(transfer: &Transfer) -> Self {
        let kind =
            EventType::of_status(transfer.status).expect("a status change never leads to pending");
        assert!(
            transfer.status_sequence >= 1,
            "a changed transfer counts its change"
        );
        let id = Uuid::now_v7();
        let created_at = transfer.updated_at;
        let view = TransferView::from(transfer);
        let body = serde_json::to_string(&EventBody {
            id: event_id_text(id),
            kind,
            created_at: created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            data: EventData {
                object: &view,
                sequence: transfer.status_sequence,
            },
        })
        .expect("an event body serializes");
        Self {
            id,
            client_id: transfer.client_id.0,
            transfer_id: transfer.id,
            kind,
            created_at,
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_are_random() {
        let a = WebhookSecret::generate();
        assert!(a.encode().starts_with("whsec_"));
        assert_eq!(WebhookSecret::parse(&a.encode()).unwrap(), a);
        assert_ne!(WebhookSecret::generate(), a);
        assert!(WebhookSecret::parse("whsec_AAAA").is_err());
        assert!(WebhookSecret::parse("nope").is_err());
    }

    #[test]
    fn signature_is_hmac_sha256_over_id_timestamp_and_body() {
        let s = WebhookSecret([7u8; 32]);
        let header = s.sign("msg_1", 1_614_265_330, b"{\"test\": 2432232314}");
        let mut mac = Hmac::<Sha256>::new_from_slice(&[7u8; 32]).unwrap();
        mac.update(b"msg_1.1614265330.{\"test\": 2432232314}");
        let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
        assert_eq!(header, expected);
        assert!(s.verify(
            &format!("v1,bogus {header}"),
            "msg_1",
            1_614_265_330,
            b"{\"test\": 2432232314}"
        ));
        assert!(!s.verify(&header, "msg_1", 1_614_265_331, b"{\"test\": 2432232314}"));
        assert!(!s.verify(&header, "msg_1", 1_614_265_330, b"{\"test\": 1}"));
    }

    #[test]
    fn internal_addresses_are_refused_unless_allowed() {
        let public = AddressPolicy::PublicOnly;
        for bad in [
            "http://127.0.0.1/x",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://172.16.5.4/",
            "http://169.254.169.254/latest/meta-data",
            "http://0.0.0.0/",
            "http://100.64.0.1/",
            "http://[::1]/",
            "http://[fe80::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::a00:1]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[64:ff9b:1::1]/",
            "http://[::10.0.0.1]/",
            "http://[::127.0.0.1]/",
            "http://[::8.8.8.8]/",
            "http://[fec0::1]/",
            "http://[2002:a00:1::1]/",
            "http://[2001:0:4136:e378::1]/",
            "http://[2001:db8::1]/",
            "http://198.18.0.1/",
            "http://198.19.255.254/",
            "http://192.0.0.8/",
            "http://240.0.0.1/",
            "http://255.255.255.254/",
            "http://192.0.2.1/",
            "http://localhost:8080/",
            "http://api.localhost/",
        ] {
            assert!(EndpointUrl::parse(bad, public).is_err(), "{bad}");
            assert!(
                EndpointUrl::parse(bad, AddressPolicy::AllowPrivate).is_ok(),
                "{bad}"
            );
        }
        for bad in [
            "ftp://example.com/",
            "example.com/hook",
            "https://user:pw@example.com/",
            "http://",
        ] {
            assert!(
                EndpointUrl::parse(bad, AddressPolicy::AllowPrivate).is_err(),
                "{bad}"
            );
        }
        assert!(EndpointUrl::parse("https://hooks.example.com/payrail?x=1", public).is_ok());
        assert!(EndpointUrl::parse("http://93.184.216.34:8443/", public).is_ok());
        assert!(EndpointUrl::parse("http://[2606:2800:220:1::1]/", public).is_ok());
        assert!(EndpointUrl::parse("http://198.20.0.1/", public).is_ok());
    }

    #[test]
    fn event_ids_round_trip() {
        let id = Uuid::now_v7();
        assert_eq!(parse_event_id(&event_id_text(id)), Some(id));
        assert_eq!(parse_event_id(&id.to_string()), None);
        assert_eq!(
            EventType::parse("transfer.failed"),
            Some(EventType::TransferFailed)
        );
        assert_eq!(EventType::parse("transfer.pending"), None);
    }

    #[test]
    fn the_id_floor_separates_older_events_from_newer_ones() {
        use std::time::{Duration, SystemTime};
        let before = SystemTime::now() - Duration::from_millis(2);
        let id = Uuid::now_v7();
        let after = SystemTime::now() + Duration::from_millis(2);
        assert!(
            event_id_floor(before) <= id,
            "an id made after the floor is above it"
        );
        assert!(
            event_id_floor(after) > id,
            "an id made before the floor is below it"
        );
        assert_eq!(event_id_floor(after).get_version_num(), 7);
        // Byte order is the order Postgres compares uuids in.
        assert!(event_id_floor(before).as_bytes() < id.as_bytes());
    }
}
