//! The console's HTML, rendered by maud (escaped by construction). No
//! inline script or style: the Content-Security-Policy forbids both.

use actix_web::http::StatusCode;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};
use uuid::Uuid;

use crate::store::console::{
    AuditLine, DeadRow, EndpointLine, EventLine, Live, OperatorSession, Timeline, TransferLine,
};
use crate::store::polls::StuckTransfer;

/// The pages of the navigation bar: path, label.
const NAV: [(&str, &str); 7] = [
    ("/console/transfers", "Transfers"),
    ("/console/outbox", "Dead rows"),
    ("/console/processing", "Processing"),
    ("/console/events", "Events"),
    ("/console/endpoints", "Endpoints"),
    ("/console/live", "Live"),
    ("/console/audit", "Audit"),
];

/// A time as operators read it: UTC to the millisecond.
pub fn ts(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

fn opt_ts(at: &Option<DateTime<Utc>>) -> String {
    at.as_ref().map(ts).unwrap_or_default()
}

fn head(title: &str) -> Markup {
    html! {
        (DOCTYPE)
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · payrail console" }
            link rel="stylesheet" href="/console/assets/console.css";
            script src="/console/assets/console.js" defer {}
        }
    }
}

/// A page of the signed-in console.
pub fn layout(title: &str, op: &OperatorSession, active: &str, body: Markup) -> Markup {
    html! {
        (head(title))
        body {
            header {
                a.brand href="/console/transfers" { "payrail" }
                nav {
                    @for (path, label) in NAV {
                        a href=(path) class=[(path == active).then_some("active")] { (label) }
                    }
                }
                form.signout method="post" action="/console/sign-out" {
                    span.who { (op.operator_name) }
                    input type="hidden" name="csrf" value=(op.csrf_token);
                    button type="submit" { "Sign out" }
                }
            }
            main {
                h1 { (title) }
                (body)
            }
        }
    }
}

/// The sign-in form; `csrf` is the value of the double-submit cookie.
pub fn sign_in(csrf: &str, error: Option<&str>) -> Markup {
    html! {
        (head("Sign in"))
        body.signin {
            main {
                h1 { "payrail console" }
                @if let Some(e) = error { p.error role="alert" { (e) } }
                form method="post" action="/console/sign-in" {
                    label for="token" { "Operator token" }
                    input #token type="password" name="token" autocomplete="off" required autofocus;
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Sign in" }
                }
                p.hint { "Tokens are made with " code { "payrail operator create --name NAME" } "." }
            }
        }
    }
}

/// An error outside the signed-in layout.
pub fn error_page(status: StatusCode, message: &str) -> Markup {
    html! {
        (head("Error"))
        body.signin {
            main {
                h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
                p.error role="alert" { (message) }
                p { a href="/console/transfers" { "Back to the console" } }
            }
        }
    }
}

fn status_badge(status: &str) -> Markup {
    html! { span class={"status " (status)} { (status) } }
}

fn transfer_link(id: Uuid) -> Markup {
    html! { a.mono href={"/console/transfers/" (id)} { (id) } }
}

fn flash(message: Option<String>) -> Markup {
    html! { @if let Some(m) = message { p.flash role="status" { (m) } } }
}

/// The values a filter form shows again.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TransferQuery {
    pub status: Option<String>,
    pub client: Option<String>,
    pub id: Option<String>,
    pub key: Option<String>,
    pub reference: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub before: Option<String>,
}

fn field(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("")
}

/// The transfers page.
pub fn transfers(
    op: &OperatorSession,
    q: &TransferQuery,
    lines: &[TransferLine],
    next: Option<String>,
    scan_note: Option<i64>,
) -> Markup {
    let statuses = [
        "",
        "pending",
        "processing",
        "succeeded",
        "failed",
        "returned",
    ];
    let body = html! {
        form.filters method="get" action="/console/transfers" {
            label { "Status " select name="status" {
                @for s in statuses {
                    option value=(s) selected[field(&q.status) == s] { @if s.is_empty() { "any" } @else { (s) } }
                }
            } }
            label { "Client " input name="client" value=(field(&q.client)) placeholder="client id"; }
            label { "Transfer " input name="id" value=(field(&q.id)) placeholder="transfer id"; }
            label { "Idempotency key " input name="key" value=(field(&q.key)); }
            label { "Provider reference " input name="reference" value=(field(&q.reference)); }
            label { "From " input type="datetime-local" step="1" name="from" value=(field(&q.from)); }
            label { "To " input type="datetime-local" step="1" name="to" value=(field(&q.to)); }
            button type="submit" { "Filter" }
            a href="/console/transfers" { "Clear" }
        }
        @if lines.is_empty() { p.empty { "No transfer matches." } }
        @else {
            table.rows {
                thead { tr { th { "Transfer" } th { "Status" } th { "Client" } th { "Idempotency key" }
                    th.num { "Amount (minor units)" } th { "Provider reference" } th { "Created (UTC)" } } }
                tbody {
                    @for t in lines {
                        tr {
                            td { (transfer_link(t.id)) }
                            td { (status_badge(&t.status)) }
                            td.mono { (t.client_id) }
                            td.mono { (t.idempotency_key) }
                            td.num { (t.amount) " " (t.currency) }
                            td.mono { (t.provider_reference.as_deref().unwrap_or("")) }
                            td { (ts(&t.created_at)) }
                        }
                    }
                }
            }
        }
        @if let Some(n) = scan_note {
            p.note { "Stopped after reading " (n) " transfers (status and provider reference are not indexed); older matches may follow." }
        }
        @if let Some(href) = next { p.pager { a rel="next" href=(href) { "Older →" } } }
    };
    layout("Transfers", op, "/console/transfers", body)
}

/// One transfer's timeline.
pub fn timeline(op: &OperatorSession, t: &Timeline) -> Markup {
    let tr = &t.transfer;
    let body = html! {
        dl.facts {
            dt { "Transfer" } dd.mono { (tr.id) }
            dt { "Status" } dd { (status_badge(tr.status.as_str())) " (change " (tr.status_sequence) ")" }
            dt { "Client" } dd.mono { (tr.client_id) }
            dt { "Idempotency key" } dd.mono { (tr.idempotency_key.as_str()) }
            dt { "Amount (minor units)" } dd { (tr.request.amount.minor_units()) " " (tr.request.currency.code()) }
            dt { "From → to" } dd.mono { (tr.request.source_account.as_str()) " → " (tr.request.destination_account.as_str()) }
            dt { "Provider reference" } dd.mono { (tr.provider_reference.as_deref().unwrap_or("—")) }
            @if let Some(r) = &tr.failure_reason { dt { "Failure reason" } dd { (r) } }
            @if let Some(r) = &tr.return_reason { dt { "Return reason" } dd { (r) " at " (opt_ts(&tr.returned_at)) } }
            dt { "Created / updated (UTC)" } dd { (ts(&tr.created_at)) " / " (ts(&tr.updated_at)) }
        }
        section #key {
            h2 { "Idempotency key" }
            @match &t.key {
                Some(k) => p { "Stored " (ts(&k.created_at)) "; replays answer " (k.response_status) " until " (ts(&k.expires_at)) "." },
                None => p.empty { "The key's record has expired (replays are no longer answered from it)." },
            }
        }
        (attempts_section(op, t))
        (reports_section(t))
        section #events {
            h2 { "Status changes and their webhook events" }
            (events_table(op, &t.events))
            @if !t.events_complete {
                p.note { "The transfer changed status " (tr.status_sequence) " times; the other changes' events were deleted after --event-retention." }
            }
        }
        section #audit {
            h2 { "Operator actions" }
            (audit_table(&t.audit))
        }
    };
    layout(
        &format!("Transfer {}", tr.id),
        op,
        "/console/transfers",
        body,
    )
}

/// A timeline's provider calls, its outbox row (with the retry form when
/// it is dead) and its lookups.
fn attempts_section(op: &OperatorSession, t: &Timeline) -> Markup {
    let tr = &t.transfer;
    html! {
        section #attempts {
            h2 { "Provider attempts" }
            @if t.attempts.is_empty() { p.empty { "No call recorded yet." } }
            @else {
                table.rows { thead { tr { th { "#" } th { "Outcome" } th { "Detail" } th { "At (UTC)" } } }
                    tbody { @for a in &t.attempts { tr { td { (a.attempt) } td { (a.outcome) } td { (a.detail.as_deref().unwrap_or("")) } td { (ts(&a.at)) } } } } }
            }
            @if let Some(o) = &t.outbox {
                p.note {
                    @if let Some(dead) = &o.dead_at { "Dead-lettered " (ts(dead)) " after " (o.attempts) " claims. " }
                    @else { "In the outbox: " (o.attempts) " claims, next due " (ts(&o.available_at)) ". " }
                    @if o.ambiguous { "An earlier call's outcome is unknown: the relay looks the payout up before it posts again. " }
                    @if let Some(e) = &o.last_error { "Last error: " (e) }
                }
                @if o.dead_at.is_some() {
                    form method="post" action="/console/outbox/retry" {
                        input type="hidden" name="csrf" value=(op.csrf_token);
                        input type="hidden" name="transfer_id" value=(tr.id);
                        button type="submit" { "Retry this payout" }
                    }
                }
            }
            @if let Some(p) = &t.poll {
                p.note { "Processing since " (ts(&p.processing_since)) "; " (p.attempts) " lookups, next " (ts(&p.next_poll_at)) "."
                    @if let Some(e) = &p.last_error { " Last lookup: " (e) } }
            }
        }
    }
}

/// What the provider reported on its own: notifications, and reports that
/// contradicted a final status.
fn reports_section(t: &Timeline) -> Markup {
    let tr = &t.transfer;
    html! {
        section #notifications {
            h2 { "Provider notifications" }
            @if t.notifications.is_empty() { p.empty { "None received." } }
            @else {
                table.rows { thead { tr { th { "Notification" } th { "Reported" } th { "Received (UTC)" } } }
                    tbody { @for n in &t.notifications { tr { td.mono { (n.id) } td { (n.reported.as_deref().unwrap_or("")) } td { (ts(&n.received_at)) } } } } }
            }
        }
        section #anomalies {
            h2 { "Anomalies" }
            @if tr.anomalies.is_empty() { p.empty { "None: no report contradicted a final status." } }
            @else {
                table.rows { thead { tr { th { "Status then" } th { "Reported" } th { "Source" } th { "Reason" } th { "At" } } }
                    tbody { @for a in &tr.anomalies { tr { td { (a.status_then.as_str()) } td { (a.reported) } td { (a.source) } td { (a.reason.as_deref().unwrap_or("")) } td { (a.reported_at) } } } } }
            }
        }
    }
}

fn events_table(op: &OperatorSession, events: &[EventLine]) -> Markup {
    html! {
        @if events.is_empty() { p.empty { "No event." } }
        @else {
            table.rows {
                thead { tr { th { "Event" } th { "Type" } th { "Transfer" } th { "Made (UTC)" } th { "Deliveries" } th {} } }
                tbody {
                    @for e in events {
                        tr {
                            td.mono { (e.id) }
                            td { (e.kind) }
                            td { (transfer_link(e.transfer_id)) }
                            td { (ts(&e.created_at)) }
                            td {
                                @if e.deliveries.is_empty() { span.empty { "no endpoint" } }
                                ul.deliveries {
                                    @for d in &e.deliveries {
                                        li {
                                            span.mono { (d.endpoint_id) } ": "
                                            @if let Some(at) = &d.delivered_at { span class="status succeeded" { "delivered" } " " (ts(at)) }
                                            @else if d.dead_at.is_some() { span class="status failed" { "dead" } }
                                            @else { span class="status pending" { "pending" } }
                                            " · " (d.attempts) " attempts"
                                            @if let Some(s) = d.last_status { " · last " (s) }
                                            @if let Some(err) = &d.last_error { " · " (err) }
                                        }
                                    }
                                }
                            }
                            td {
                                form method="post" action={"/console/events/" (e.id) "/redeliver"} {
                                    input type="hidden" name="csrf" value=(op.csrf_token);
                                    button type="submit" { "Redeliver" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn audit_table(lines: &[AuditLine]) -> Markup {
    html! {
        @if lines.is_empty() { p.empty { "No operator action." } }
        @else {
            table.rows.audit {
                thead { tr { th { "#" } th { "Operator" } th { "Action" } th { "Target" } th.num { "Rows" } th { "At (UTC)" } } }
                tbody { @for a in lines { tr { td { (a.id) } td { (a.operator_name) } td { (a.action) } td.mono { (a.target) } td.num { (a.rows_touched) } td { (ts(&a.at)) } } } }
            }
        }
    }
}

/// The dead outbox rows.
pub fn dead_rows(
    op: &OperatorSession,
    error: Option<&str>,
    rows: &[DeadRow],
    count: i64,
    note: Option<String>,
) -> Markup {
    let body = html! {
        (flash(note))
        p { "Payouts whose attempts ran out. Each stays " code { "pending" } " until retried; a retry starts a fresh budget (and looks the payout up first when an earlier call's outcome is unknown)." }
        form.filters method="get" action="/console/outbox" {
            label { "Last error contains " input name="error" value=(error.unwrap_or("")); }
            button type="submit" { "Filter" }
            a href="/console/outbox" { "Clear" }
        }
        p.count { (count) " dead rows match." }
        @if count > 0 {
            form method="get" action="/console/outbox/retry" {
                @if let Some(e) = error { input type="hidden" name="error" value=(e); }
                button type="submit" { "Retry all " (count) " matching…" }
            }
        }
        @if !rows.is_empty() {
            table.rows {
                thead { tr { th { "Transfer" } th { "Client" } th.num { "Amount" } th.num { "Claims" } th { "Last error" } th { "Dead since (UTC)" } th {} } }
                tbody {
                    @for r in rows {
                        tr {
                            td { (transfer_link(r.transfer_id)) }
                            td.mono { (r.client_id) }
                            td.num { (r.amount) " " (r.currency) }
                            td.num { (r.attempts) }
                            td { (r.last_error.as_deref().unwrap_or("")) @if r.ambiguous { " " span.tag { "outcome unknown" } } }
                            td { (ts(&r.dead_at)) }
                            td {
                                form method="post" action="/console/outbox/retry" {
                                    input type="hidden" name="csrf" value=(op.csrf_token);
                                    input type="hidden" name="transfer_id" value=(r.transfer_id);
                                    button type="submit" { "Retry" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout("Dead outbox rows", op, "/console/outbox", body)
}

/// The confirmation of a bulk retry, stating how many rows it touches.
pub fn retry_confirm(op: &OperatorSession, error: Option<&str>, count: i64, max: i64) -> Markup {
    let body = html! {
        p.confirm {
            "This retries " strong #confirm-count { (count.min(max)) } " dead outbox rows"
            @if let Some(e) = error { " whose last error contains " code { (e) } }
            @if count > max { " (the first " (max) " of " (count) "; --console-bulk-rows-max)" }
            "."
        }
        form method="post" action="/console/outbox/retry" {
            input type="hidden" name="csrf" value=(op.csrf_token);
            @if let Some(e) = error { input type="hidden" name="error" value=(e); }
            input type="hidden" name="all" value="1";
            button type="submit" { "Retry " (count.min(max)) " rows" }
            " " a href="/console/outbox" { "Cancel" }
        }
    };
    layout("Retry dead rows", op, "/console/outbox", body)
}

/// Transfers the provider accepted and has not decided.
pub fn processing(
    op: &OperatorSession,
    rows: &[StuckTransfer],
    stuck_after: &str,
    stuck_before: DateTime<Utc>,
) -> Markup {
    let body = html! {
        p { "Oldest first. Past " (stuck_after) " a transfer counts as stuck: it is still looked up, and the provider should be asked about it." }
        @if rows.is_empty() { p.empty { "No transfer is processing." } }
        @else {
            table.rows {
                thead { tr { th { "Transfer" } th { "Processing since (UTC)" } th.num { "Lookups" } th { "Last lookup" } th { "Next lookup" } th {} } }
                tbody {
                    @for r in rows {
                        tr {
                            td { (transfer_link(r.transfer_id)) }
                            td { (ts(&r.processing_since)) }
                            td.num { (r.polls) }
                            td { (r.last_error.as_deref().unwrap_or("")) }
                            td { (ts(&r.next_poll_at)) }
                            td { @if r.processing_since < stuck_before { span.tag { "stuck" } } }
                        }
                    }
                }
            }
        }
    };
    layout("Processing", op, "/console/processing", body)
}

/// Webhook events across clients.
pub fn events(
    op: &OperatorSession,
    dead: bool,
    events: &[EventLine],
    next: Option<String>,
    note: Option<String>,
) -> Markup {
    let body = html! {
        (flash(note))
        form.filters method="get" action="/console/events" {
            label { "Transfer " input name="transfer" placeholder="its timeline"; }
            label.check { input type="checkbox" name="dead" value="1" checked[dead]; " with a dead delivery" }
            button type="submit" { "Filter" }
            a href="/console/events" { "Clear" }
        }
        (events_table(op, events))
        @if let Some(href) = next { p.pager { a rel="next" href=(href) { "Older →" } } }
    };
    layout("Webhook events", op, "/console/events", body)
}

/// Endpoints that need an operator.
pub fn endpoints(op: &OperatorSession, lines: &[EndpointLine], note: Option<String>) -> Markup {
    let body = html! {
        (flash(note))
        p { "Endpoints disabled (they answered 410 Gone) or with deliveries that ran out of attempts." }
        @if lines.is_empty() { p.empty { "Every endpoint is live and has no dead delivery." } }
        @else {
            table.rows {
                thead { tr { th { "Endpoint" } th { "Client" } th { "URL" } th { "Disabled (UTC)" } th.num { "Dead deliveries" } th {} } }
                tbody {
                    @for e in lines {
                        tr {
                            td.mono { (e.id) }
                            td.mono { (e.client_id) }
                            td.mono { (e.url) }
                            td { (opt_ts(&e.disabled_at)) }
                            td.num { (e.dead) }
                            td { a.button href={"/console/endpoints/" (e.id) "/revive"} {
                                @if e.disabled_at.is_some() { "Re-enable…" } @else { "Redeliver dead…" } } }
                        }
                    }
                }
            }
        }
    };
    layout("Webhook endpoints", op, "/console/endpoints", body)
}

/// The confirmation of re-enabling an endpoint and redelivering its dead
/// deliveries.
pub fn revive_confirm(op: &OperatorSession, e: &EndpointLine, max: i64) -> Markup {
    let n = e.dead.min(max);
    let body = html! {
        p.confirm {
            @if e.disabled_at.is_some() { "This re-enables " code { (e.url) } " and redelivers " }
            @else { "This redelivers to " code { (e.url) } " " }
            strong #confirm-count { (n) } " dead deliveries, each with a fresh schedule."
        }
        form method="post" action={"/console/endpoints/" (e.id) "/revive"} {
            input type="hidden" name="csrf" value=(op.csrf_token);
            button type="submit" { "Confirm" }
            " " a href="/console/endpoints" { "Cancel" }
        }
    };
    layout("Revive endpoint", op, "/console/endpoints", body)
}

/// The live view: figures refreshed by `console.js` without a reload.
pub fn live(op: &OperatorSession, l: &Live) -> Markup {
    let tiles: [(&str, &str, String); 7] = [
        (
            "creates_per_second",
            "Creates / s",
            format!("{:.1}", l.creates_per_second),
        ),
        (
            "settlements_per_second",
            "Settlements / s",
            format!("{:.1}", l.settlements_per_second),
        ),
        (
            "outbox_backlog",
            "Outbox backlog",
            l.outbox_backlog.to_string(),
        ),
        ("outbox_dead", "Dead outbox rows", l.outbox_dead.to_string()),
        ("processing", "Processing", l.processing.to_string()),
        (
            "deliveries_backlog",
            "Webhook backlog",
            l.deliveries_backlog.to_string(),
        ),
        (
            "deliveries_dead",
            "Dead deliveries",
            l.deliveries_dead.to_string(),
        ),
    ];
    let body = html! {
        div.tiles #live data-source="/console/live.json" {
            @for (key, label, value) in &tiles {
                div.tile { span.label { (label) } span.value data-live=(key) { (value) } }
            }
        }
        p.note { "Rates over the last 5 s, from the database (every serve process shows the same). Updated " span #live-updated { "now" } "." }
        canvas #live-chart width="900" height="180" {}
    };
    layout("Live", op, "/console/live", body)
}

/// The audit log.
pub fn audit(op: &OperatorSession, lines: &[AuditLine], next: Option<String>) -> Markup {
    let body = html! {
        (audit_table(lines))
        @if let Some(href) = next { p.pager { a rel="next" href=(href) { "Older →" } } }
    };
    layout("Audit", op, "/console/audit", body)
}
