//! A webhook receiver written for the tests, independent of the engine's
//! own signing code: it records every arrival and answers as told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How the receiver answers.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// This status, every time.
    Status(u16),
    /// `500` for the first `n` arrivals, then `204`.
    FailFirst(usize),
    /// Never answers (within any sane timeout).
    Hang,
}

/// One request that reached the receiver.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: Vec<u8>,
    /// What the receiver answered (0 while hanging).
    pub answered: u16,
}

#[derive(Default)]
struct State {
    arrivals: Vec<Arrival>,
    in_flight: Vec<String>,
    overlapping: usize,
}

/// The receiver, on a random loopback port.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    mode: Arc<Mutex<Mode>>,
    state: Arc<Mutex<State>>,
    latency: Duration,
}

async fn arrive(rx: web::Data<Receiver>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let id = header("webhook-id");
    let mode = *rx.mode.lock().unwrap();
    let index = {
        let mut s = rx.state.lock().unwrap();
        if s.in_flight.contains(&id) {
            s.overlapping += 1;
        }
        s.in_flight.push(id.clone());
        s.arrivals.push(Arrival {
            id: id.clone(),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            body: body.to_vec(),
            answered: 0,
        });
        s.arrivals.len() - 1
    };
    tokio::time::sleep(rx.latency).await;
    let status = match mode {
        Mode::Status(s) => s,
        Mode::FailFirst(n) if index < n => 500,
        Mode::FailFirst(_) => 204,
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            204
        }
    };
    let mut s = rx.state.lock().unwrap();
    s.arrivals[index].answered = status;
    if let Some(at) = s.in_flight.iter().position(|i| *i == id) {
        s.in_flight.remove(at);
    }
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
        .body("receiver says")
}

impl Receiver {
    /// Starts it; every answer waits `latency` first.
    pub async fn start(mode: Mode, latency: Duration) -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let rx = Receiver {
            url,
            mode: Arc::new(Mutex::new(mode)),
            state: Arc::new(Mutex::new(State::default())),
            latency,
        };
        let data = web::Data::new(rx.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(arrive))
        })
        .workers(2)
        .disable_signals()
        .shutdown_timeout(0)
        .listen(listener)
        .unwrap()
        .run();
        actix_web::rt::spawn(server);
        rx
    }

    /// Changes how later arrivals are answered.
    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Everything that arrived so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.lock().unwrap().arrivals.clone()
    }

    /// Arrivals answered `2xx`.
    pub fn accepted(&self) -> Vec<Arrival> {
        self.arrivals()
            .into_iter()
            .filter(|a| (200..300).contains(&a.answered))
            .collect()
    }

    /// Arrivals of an id while another arrival of it was being answered.
    pub fn overlapping(&self) -> usize {
        self.state.lock().unwrap().overlapping
    }
}

/// Standard Webhooks verification, written from the specification: HMAC-SHA256
/// keyed with the base64-decoded part of `whsec_…`, over `id.timestamp.body`,
/// compared with any `v1,` entry of the header.
pub fn signature_is_valid(secret: &str, arrival: &Arrival) -> bool {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64 secret");
    let mut signed = format!("{}.{}.", arrival.id, arrival.timestamp).into_bytes();
    signed.extend_from_slice(&arrival.body);
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(&signed);
    let expected = BASE64.encode(mac.finalize().into_bytes());
    arrival
        .signature
        .split(' ')
        .any(|entry| entry == format!("v1,{expected}"))
}
