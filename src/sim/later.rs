//! The sim's asynchronous mode, what a real payout rail does after its
//! answer: a payout answered `processing` (`--async-rate`) is decided after
//! a random delay (`--settle-after-ms`), a succeeded payout may come back
//! `returned` later (`--return-rate`), and every change is told to
//! `--notify-url` by a notification signed like a webhook (Standard
//! Webhooks, `--notify-secret`): sometimes twice, sometimes late (overtaken
//! by a later one), sometimes never (`--notify-*-rate`), and sent again on
//! any answer but a `2xx`, as a provider does.

use std::time::Duration;

use actix_web::web;
use uuid::Uuid;

use super::app::App;
use super::wire::PayoutRecord;

/// Reasons a returned payout gives.
pub const RETURN_REASONS: &[&str] = &["account_closed", "beneficiary_rejected", "invalid_account"];

/// Counts a piece of later work as pending until dropped (finished or
/// cancelled with the server), for `later_pending` in `/stats`.
struct Pending(web::Data<App>);

impl Pending {
    fn start(app: &web::Data<App>) -> Self {
        app.state.later_started();
        Self(app.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.state.later_done();
    }
}

/// Spawns the work that follows a fresh execution: the decision of a
/// `processing` payout, or the return of a succeeded one.
pub fn after_execution(app: &web::Data<App>, id: Uuid, status: &str) {
    let work = match status {
        "processing" => Some(true),
        "succeeded" if app.later.return_rate > 0.0 => Some(false),
        _ => None,
    };
    if let Some(decide) = work {
        let pending = Pending::start(app);
        let app = app.clone();
        tokio::spawn(async move {
            let _pending = pending;
            if decide {
                settle_later(app, id).await
            } else {
                return_later(app, id).await
            }
        });
    }
}

/// After a `processing` answer: decide the payout later, tell, and maybe
/// return it later still.
async fn settle_later(app: web::Data<App>, id: Uuid) {
    let (min, max) = app.later.settle_after_ms;
    tokio::time::sleep(app.faults.millis_between(min, max)).await;
    let Some(record) = app.state.record(id) else {
        return;
    };
    let decline = app.faults.decline(&record.request.destination_account);
    let Some(decided) = app.state.decide(id, decline) else {
        return;
    };
    let succeeded = decided.status == "succeeded";
    notify(&app, decided, Kind::Decision);
    if succeeded {
        return_later(app, id).await;
    }
}

/// After a success: with `--return-rate`, return it after a delay, and tell.
async fn return_later(app: web::Data<App>, id: Uuid) {
    if !app.faults.chance(app.later.return_rate) {
        return;
    }
    let (min, max) = app.later.settle_after_ms;
    tokio::time::sleep(app.faults.millis_between(min, max)).await;
    let reason = RETURN_REASONS[app.faults.index(RETURN_REASONS.len())];
    if let Some(returned) = app.state.return_payout(id, reason) {
        notify(&app, returned, Kind::Return);
    }
}

/// `{"type":"payout.updated","data":{"transfer_id","status","reference","reason"}}`.
pub fn notification_body(record: &PayoutRecord) -> String {
    serde_json::json!({
        "type": "payout.updated",
        "data": {
            "transfer_id": record.request.transfer_id,
            "status": record.status,
            "reference": record.reference,
            "reason": record.reason,
        }
    })
    .to_string()
}

/// What a notification tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The decision of a `processing` payout.
    Decision,
    /// The return of a succeeded payout.
    Return,
}

/// Tells the receiver about `record`'s current status, with the faults
/// configured, in the background. A decision's notification is dropped at
/// `--notify-drop-rate` (the engine looks up undecided payouts, and so
/// learns a decision it was never told), a return's at
/// `--notify-return-drop-rate` (the engine looks succeeded payouts up
/// again during their return window).
fn notify(app: &web::Data<App>, record: PayoutRecord, kind: Kind) {
    let Some(n) = &app.later.notifier else {
        return;
    };
    let drop_rate = match kind {
        Kind::Decision => n.drop_rate,
        Kind::Return => n.return_drop_rate,
    };
    if app.faults.chance(drop_rate) {
        app.state.count_notifications(0, 1, 0);
        return;
    }
    let id = format!("ntf_{}", Uuid::new_v4());
    let body = notification_body(&record);
    let copies = if app.faults.chance(n.duplicate_rate) {
        2
    } else {
        1
    };
    let (min, max) = app.later.settle_after_ms;
    for _ in 0..copies {
        // Held back past the next change's delay, so that one overtakes it.
        let hold = if app.faults.chance(n.reorder_rate) {
            app.faults
                .millis_between(max, max.saturating_mul(2).max(min + 100))
        } else {
            Duration::ZERO
        };
        let (app, id, body) = (app.clone(), id.clone(), body.clone());
        let pending = Pending::start(&app);
        tokio::spawn(async move {
            let _pending = pending;
            tokio::time::sleep(hold).await;
            let n = app
                .later
                .notifier
                .as_ref()
                .expect("checked before spawning");
            let sent = n.deliver(&id, &body).await;
            app.state
                .count_notifications(u64::from(sent), 0, u64::from(!sent));
        });
    }
}
