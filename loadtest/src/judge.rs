//! What an answer means: whether an attempt is done or retried, and whether
//! the answer breaks the API's contract. Every answer is judged as it
//! arrives, since some broken promises (a second fresh `201`, a replay that
//! is not byte-identical) are visible only on the wire.

use uuid::Uuid;

use crate::client::{Answer, Transfer};
use crate::intent::Intent;
use crate::mix::Scenario;
use crate::record::Violations;

/// What an attempt's answer is expected to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `201` (fresh or replayed).
    Create,
    /// `422 idempotency-key-reused`: the key with a changed body.
    Reuse,
}

/// How a sender's run of attempts ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// A `201` named this transfer.
    Created(Uuid),
    /// The expected `422 idempotency-key-reused`.
    KeyReused,
    /// A final answer that is a violation (already recorded).
    Unexpected,
    /// Attempts or time ran out without a final answer.
    GaveUp,
}

/// What to do after one answer.
pub enum Next {
    Done(End),
    Retry,
}

/// The problem type a retryable status must carry (docs/API.md).
fn retryable_types(status: u16) -> Option<&'static [&'static str]> {
    match status {
        409 => Some(&["/problems/request-in-progress"]),
        429 => Some(&["/problems/rate-limited"]),
        // settlement-lagging: a database failover stops settlement for the
        // leader's ttl, so the engine rightly refuses new transfers until the
        // relay catches up.
        503 => Some(&[
            "/problems/unavailable",
            "/problems/overloaded",
            "/problems/settlement-lagging",
        ]),
        _ => None,
    }
}

/// Checks one answer against the contract, recording what it breaks in
/// `violations`, and decides what comes next. `seq` is the attempt's number
/// within the intent; `acked_before` says whether a `201` had already arrived
/// when it was sent.
pub fn judge(
    violations: &Violations,
    intent: &Intent,
    phase: Phase,
    answer: &Answer,
    seq: u32,
    acked_before: bool,
) -> Next {
    let key = &intent.key;
    let scenario = intent.scenario;
    let violation = |what: String| violations.push(format!("key {key} ({scenario}): {what}"));
    let status = answer.status;

    if let Some(types) = retryable_types(status) {
        let ty = answer.problem_type();
        if !ty.as_deref().is_some_and(|t| types.contains(&t)) {
            violation(format!(
                "{status} with problem type {ty:?}, expected one of {types:?}"
            ));
        }
        return Next::Retry;
    }
    // 408: the request did not arrive in time, so nothing was stored; the
    // same key is retried. The body timeout answers problem+json; the HTTP
    // layer's head timeout (say, after the server was paused with the head
    // already in its socket) answers with an empty body.
    if status == 408 {
        let ty = answer.problem_type();
        if !answer.body.is_empty() && ty.as_deref() != Some("/problems/request-timeout") {
            violation(format!(
                "408 with problem type {ty:?}, expected /problems/request-timeout or no body"
            ));
        }
        return Next::Retry;
    }
    if (500..600).contains(&status) {
        violation(format!("unexpected status {status}; retried"));
        return Next::Retry;
    }

    match (phase, status) {
        (Phase::Reuse, 422) => {
            let ty = answer.problem_type();
            if ty.as_deref() == Some("/problems/idempotency-key-reused") {
                Next::Done(End::KeyReused)
            } else {
                violation(format!(
                    "changed body answered 422 of type {ty:?}, expected /problems/idempotency-key-reused"
                ));
                Next::Done(End::Unexpected)
            }
        }
        (_, 201) => {
            // The first answer's bytes were parsed and checked when they came;
            // the same bytes again name the same transfer and pass the same checks.
            let known = intent
                .state()
                .first
                .as_ref()
                .filter(|(body, _)| *body == answer.body)
                .map(|&(_, id)| id);
            let id = match known {
                Some(id) => id,
                None => {
                    let transfer: Transfer = match serde_json::from_slice(&answer.body) {
                        Ok(t) => t,
                        Err(e) => {
                            violation(format!("201 body is not a transfer: {e}"));
                            return Next::Done(End::Unexpected);
                        }
                    };
                    if phase == Phase::Create {
                        check_transfer(intent, &transfer, &violation);
                    }
                    transfer.id
                }
            };
            if phase == Phase::Reuse {
                // Remembered so the audit reads this transfer back too.
                intent.state().ids.insert(id);
                violation(format!(
                    "the key with a changed amount was answered 201{} (transfer {id}), expected 422 idempotency-key-reused",
                    if answer.replayed { " as a replay" } else { "" }
                ));
                return Next::Done(End::Unexpected);
            }
            check_created(intent, answer, id, seq, acked_before, &violation);
            Next::Done(End::Created(id))
        }
        _ => {
            let ty = answer.problem_type();
            let expected = match phase {
                Phase::Create => "201",
                Phase::Reuse => "422 idempotency-key-reused",
            };
            violation(format!(
                "unexpected status {status} (problem type {ty:?}), expected {expected}"
            ));
            Next::Done(End::Unexpected)
        }
    }
}

/// What a `201` body must say: a transfer of the intent's key with the
/// fields the intent sent.
fn check_transfer(intent: &Intent, transfer: &Transfer, violation: &dyn Fn(String)) {
    let id = transfer.id;
    if transfer.idempotency_key != intent.key {
        violation(format!(
            "201 names transfer {id} of key {:?}",
            transfer.idempotency_key
        ));
    }
    let mismatches = intent.body.mismatches(transfer);
    if !mismatches.is_empty() {
        violation(format!(
            "201 transfer {id} differs from the request: {}",
            mismatches.join("; ")
        ));
    }
}

/// The promises every `201` makes: it names the intent's transfer, the same
/// one as every other answer, with the same bytes, and it is "fresh" at most once.
fn check_created(
    intent: &Intent,
    answer: &Answer,
    id: Uuid,
    seq: u32,
    acked_before: bool,
    violation: &dyn Fn(String),
) {
    let expected_location = format!("/transfers/{id}");
    if answer.location.as_deref() != Some(expected_location.as_str()) {
        violation(format!(
            "201 Location {:?}, expected {expected_location:?}",
            answer.location
        ));
    }

    let mut st = intent.state();
    st.acknowledged = true;
    match &st.first {
        Some((first, _)) if *first != answer.body => {
            violation(format!(
                "replayed body for transfer {id} is not byte-identical to the first answer"
            ));
        }
        Some(_) => {}
        None => st.first = Some((answer.body.clone(), id)),
    }
    if st.ids.insert(id) && st.ids.len() > 1 {
        violation(format!("answers name different transfers: {:?}", st.ids));
    }
    if answer.replayed {
        // A burst's attempts race, so only a lone first attempt is known to be first.
        if seq == 0 && intent.scenario != Scenario::Burst {
            violation(format!(
                "the first attempt of a new key was answered as a replay (transfer {id})"
            ));
        }
    } else {
        st.fresh += 1;
        if acked_before {
            violation(format!(
                "an attempt sent after the key was acknowledged got a fresh 201 without Idempotent-Replayed (transfer {id})"
            ));
        } else if st.fresh > 1 {
            violation(format!(
                "{} answers created the key (201 without Idempotent-Replayed)",
                st.fresh
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::intent::test_factory;

    fn created(intent: &Intent, id: Uuid, replayed: bool, amount: i64) -> Answer {
        let b = &intent.body;
        let body = serde_json::json!({
            "id": id, "status": "pending", "amount": amount, "currency": b.currency,
            "source_account": b.source_account, "destination_account": b.destination_account,
            "description": b.description, "metadata": b.metadata,
            "idempotency_key": intent.key, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "provider_reference": null, "failure_reason": null
        });
        Answer {
            status: 201,
            replayed,
            location: Some(format!("/transfers/{id}")),
            retry_after: None,
            body: Bytes::from(serde_json::to_vec(&body).unwrap()),
        }
    }

    fn problem(status: u16, slug: &str) -> Answer {
        Answer {
            status,
            replayed: false,
            location: None,
            retry_after: Some(Duration::from_secs(1)),
            body: Bytes::from(format!(
                r#"{{"type":"/problems/{slug}","status":{status}}}"#
            )),
        }
    }

    fn violations(found: &Violations) -> Vec<String> {
        found.take().0
    }

    /// Judges `answer` to attempt `seq` of the create phase.
    fn create(found: &Violations, it: &Intent, answer: &Answer, seq: u32, acked: bool) -> Next {
        judge(found, it, Phase::Create, answer, seq, acked)
    }

    /// Takes the violations found so far and asserts one names each of `texts`.
    fn assert_flagged(found: &Violations, texts: &[&str]) {
        let v = violations(found);
        for text in texts {
            assert!(v.iter().any(|m| m.contains(text)), "{text}: {v:?}");
        }
    }

    #[test]
    fn a_creation_and_its_replays_are_fine() {
        let (found, it) = (Violations::default(), test_factory("unique=1").make(1));
        let id = Uuid::now_v7();
        let amount = it.body.amount;
        assert!(matches!(
            create(&found, &it, &created(&it, id, false, amount), 0, false),
            Next::Done(End::Created(x)) if x == id
        ));
        create(&found, &it, &created(&it, id, true, amount), 1, true);
        assert_eq!(violations(&found), Vec::<String>::new());
        let st = it.state();
        assert_eq!((st.fresh, st.acknowledged, st.ids.len()), (1, true, 1));
    }

    #[test]
    fn a_replay_of_the_first_bytes_is_still_checked_for_its_location() {
        let (found, it) = (Violations::default(), test_factory("replay=1").make(1));
        let id = Uuid::now_v7();
        let first = created(&it, id, false, it.body.amount);
        create(&found, &it, &first, 0, false);
        let elsewhere = Answer {
            replayed: true,
            location: Some(format!("/transfers/{}", Uuid::nil())),
            ..first
        };
        create(&found, &it, &elsewhere, 1, true);
        let v = violations(&found);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("201 Location"), "{v:?}");
    }

    #[test]
    fn a_408_is_retried_with_a_problem_or_no_body_and_anything_else_is_a_violation() {
        let (found, it) = (Violations::default(), test_factory("unique=1").make(1));
        let bare = Answer {
            body: Bytes::new(),
            ..problem(408, "x")
        };
        for answer in [problem(408, "request-timeout"), bare] {
            assert!(matches!(
                create(&found, &it, &answer, 0, false),
                Next::Retry
            ));
        }
        assert_eq!(violations(&found), Vec::<String>::new());
        assert!(matches!(
            create(&found, &it, &problem(408, "unavailable"), 0, false),
            Next::Retry
        ));
        assert_eq!(violations(&found).len(), 1);
    }

    #[test]
    fn a_second_creation_or_another_id_is_a_violation() {
        let (found, it) = (Violations::default(), test_factory("burst=1").make(1));
        let amount = it.body.amount;
        let id = Uuid::now_v7();
        create(&found, &it, &created(&it, id, false, amount), 0, false);
        create(&found, &it, &created(&it, id, false, amount), 1, false);
        assert_flagged(&found, &["2 answers created the key"]);

        create(
            &found,
            &it,
            &created(&it, Uuid::now_v7(), true, amount),
            2,
            true,
        );
        assert_flagged(&found, &["different transfers", "not byte-identical"]);
    }

    #[test]
    fn a_fresh_answer_after_acknowledgement_or_a_replay_first_is_a_violation() {
        let (found, it) = (Violations::default(), test_factory("storm=1").make(1));
        let amount = it.body.amount;
        create(
            &found,
            &it,
            &created(&it, Uuid::nil(), true, amount),
            0,
            false,
        );
        assert_flagged(&found, &["first attempt of a new key"]);
        create(
            &found,
            &it,
            &created(&it, Uuid::nil(), false, amount),
            1,
            true,
        );
        assert_flagged(&found, &["after the key was acknowledged"]);
    }

    #[test]
    fn a_created_transfer_must_match_the_request() {
        let (found, it) = (Violations::default(), test_factory("unique=1").make(1));
        let amount = it.body.amount + 1;
        create(
            &found,
            &it,
            &created(&it, Uuid::nil(), false, amount),
            0,
            false,
        );
        assert_flagged(&found, &["differs from the request"]);
    }

    #[test]
    fn reuse_expects_the_reused_problem_and_nothing_else() {
        let (found, it) = (Violations::default(), test_factory("reuse=1").make(1));
        let ok = judge(
            &found,
            &it,
            Phase::Reuse,
            &problem(422, "idempotency-key-reused"),
            1,
            true,
        );
        assert!(matches!(ok, Next::Done(End::KeyReused)));
        assert_eq!(violations(&found), Vec::<String>::new());

        let other = judge(
            &found,
            &it,
            Phase::Reuse,
            &problem(422, "validation-failed"),
            1,
            true,
        );
        assert!(matches!(other, Next::Done(End::Unexpected)));
        assert_eq!(violations(&found).len(), 1);

        let amount = it.body.amount - 1;
        let bad = judge(
            &found,
            &it,
            Phase::Reuse,
            &created(&it, Uuid::nil(), false, amount),
            1,
            true,
        );
        assert!(matches!(bad, Next::Done(End::Unexpected)));
        let v = violations(&found);
        assert!(v[0].contains("changed amount was answered 201"), "{v:?}");
        // Creating with the reused-key problem is a violation too.
        create(
            &found,
            &it,
            &problem(422, "idempotency-key-reused"),
            0,
            false,
        );
        assert_eq!(violations(&found).len(), 1);
    }

    #[test]
    fn transient_answers_are_retried_and_only_odd_ones_flagged() {
        let (found, it) = (Violations::default(), test_factory("unique=1").make(1));
        for (status, slug) in [
            (503, "unavailable"),
            (503, "overloaded"),
            (503, "settlement-lagging"),
            (409, "request-in-progress"),
            (429, "rate-limited"),
        ] {
            assert!(matches!(
                create(&found, &it, &problem(status, slug), 0, false),
                Next::Retry
            ));
        }
        assert_eq!(violations(&found), Vec::<String>::new());
        assert!(matches!(
            create(&found, &it, &problem(500, "oops"), 0, false),
            Next::Retry
        ));
        assert!(matches!(
            create(&found, &it, &problem(401, "unauthorized"), 0, false),
            Next::Done(End::Unexpected)
        ));
        assert_eq!(violations(&found).len(), 2);
    }
}
