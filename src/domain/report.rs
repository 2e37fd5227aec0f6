//! What a provider says about a payout (in its answer to the payout, in a
//! status lookup, or in a notification) and what that does to a transfer.

use super::{ProviderText, TransferStatus};

/// One provider report about one payout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderReport {
    /// Accepted; the outcome comes later.
    Processing {
        /// The provider's reference, when it gave one.
        reference: Option<ProviderText>,
    },
    /// Executed.
    Succeeded {
        /// The provider's reference.
        reference: Option<ProviderText>,
    },
    /// Declined, or rejected for good.
    Declined {
        /// Why.
        reason: ProviderText,
    },
    /// Executed, and the money came back.
    Returned {
        /// The provider's reference, when it gave one.
        reference: Option<ProviderText>,
        /// Why.
        reason: ProviderText,
    },
}

/// What a report does to a transfer in a given status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The transfer changes to the report's status.
    Change,
    /// Nothing: a repeat, or a report the transfer has moved past (a
    /// `processing` after the outcome, a `succeeded` after `returned`).
    Late,
    /// Nothing, and an operator should look: the report contradicts a final
    /// status (a decline after a success, anything but a decline after a
    /// failure).
    Anomaly,
}

impl ProviderReport {
    /// The word the provider used: `processing`, `succeeded`, `declined` or
    /// `returned`.
    pub fn reported(&self) -> &'static str {
        match self {
            Self::Processing { .. } => "processing",
            Self::Succeeded { .. } => "succeeded",
            Self::Declined { .. } => "declined",
            Self::Returned { .. } => "returned",
        }
    }

    /// The status it moves a transfer to.
    pub fn status(&self) -> TransferStatus {
        match self {
            Self::Processing { .. } => TransferStatus::Processing,
            Self::Succeeded { .. } => TransferStatus::Succeeded,
            Self::Declined { .. } => TransferStatus::Failed,
            Self::Returned { .. } => TransferStatus::Returned,
        }
    }

    /// The provider's reference it carries.
    pub fn reference(&self) -> Option<&ProviderText> {
        match self {
            Self::Processing { reference }
            | Self::Succeeded { reference }
            | Self::Returned { reference, .. } => reference.as_ref(),
            Self::Declined { .. } => None,
        }
    }

    /// The reason it carries.
    pub fn reason(&self) -> Option<&ProviderText> {
        match self {
            Self::Declined { reason } | Self::Returned { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// The reports to apply, in order, to a transfer that may still be
    /// `pending` or `processing`: a `returned` that overtook its
    /// `succeeded` brings the success with it (the payout executed, or
    /// it could not have come back), so the transfer passes through
    /// `succeeded` and announces both changes.
    pub fn steps(self) -> Vec<ProviderReport> {
        match self {
            Self::Returned { reference, reason } => vec![
                Self::Succeeded {
                    reference: reference.clone(),
                },
                Self::Returned { reference, reason },
            ],
            other => vec![other],
        }
    }

    /// What this report does to a transfer now in `now`.
    pub fn effect(&self, now: TransferStatus) -> Effect {
        use TransferStatus::*;
        let next = self.status();
        if now.may_become(next) {
            return Effect::Change;
        }
        match (now, next) {
            (a, b) if a == b => Effect::Late,
            (Failed, _) | (Succeeded | Returned, Failed) => Effect::Anomaly,
            _ => Effect::Late,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TransferStatus::*;

    fn text(s: &str) -> ProviderText {
        ProviderText::clean(s)
    }

    fn all() -> [ProviderReport; 4] {
        [
            ProviderReport::Processing { reference: None },
            ProviderReport::Succeeded {
                reference: Some(text("r")),
            },
            ProviderReport::Declined { reason: text("no") },
            ProviderReport::Returned {
                reference: None,
                reason: text("closed"),
            },
        ]
    }

    #[test]
    fn reports_move_transfers_forward_only() {
        let [processing, succeeded, declined, returned] = all();
        assert_eq!(processing.effect(Pending), Effect::Change);
        assert_eq!(succeeded.effect(Processing), Effect::Change);
        assert_eq!(declined.effect(Processing), Effect::Change);
        assert_eq!(returned.effect(Succeeded), Effect::Change);
        // Repeats and reports the transfer has moved past.
        assert_eq!(processing.effect(Processing), Effect::Late);
        assert_eq!(processing.effect(Succeeded), Effect::Late);
        assert_eq!(succeeded.effect(Succeeded), Effect::Late);
        assert_eq!(succeeded.effect(Returned), Effect::Late);
        assert_eq!(returned.effect(Returned), Effect::Late);
        assert_eq!(declined.effect(Failed), Effect::Late);
        // Contradictions of a final status.
        assert_eq!(declined.effect(Succeeded), Effect::Anomaly);
        assert_eq!(declined.effect(Returned), Effect::Anomaly);
        for r in [&processing, &succeeded, &returned] {
            assert_eq!(r.effect(Failed), Effect::Anomaly, "{r:?}");
        }
    }

    #[test]
    fn a_return_that_overtook_its_success_brings_it_along() {
        let [_, _, _, returned] = all();
        let steps = returned.steps();
        assert_eq!(
            steps.iter().map(|s| s.status()).collect::<Vec<_>>(),
            [Succeeded, Returned]
        );
        // From any status before the outcome, the steps end `returned`.
        for start in [Pending, Processing] {
            let mut now = start;
            for s in &steps {
                if s.effect(now) == Effect::Change {
                    now = s.status();
                }
            }
            assert_eq!(now, Returned);
        }
    }
}
