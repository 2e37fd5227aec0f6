/// Smallest amount accepted, in minor units.
pub const AMOUNT_MIN: i64 = 1;
/// Largest amount accepted, in minor units (docs/API.md).
pub const AMOUNT_MAX: i64 = 999_999_999_999;

/// A positive amount in the currency's minor units, at most 999 999 999 999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Amount(i64);

impl Amount {
    /// Accepts `AMOUNT_MIN..=AMOUNT_MAX`.
    pub fn parse(minor_units: i64) -> Result<Self, String> {
        if (AMOUNT_MIN..=AMOUNT_MAX).contains(&minor_units) {
            Ok(Self(minor_units))
        } else {
            Err(format!(
                "must be an integer from {AMOUNT_MIN} to {AMOUNT_MAX}"
            ))
        }
    }

    /// The amount in minor units.
    pub fn minor_units(self) -> i64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive() {
        assert!(Amount::parse(0).is_err());
        assert!(Amount::parse(-5).is_err());
        assert_eq!(Amount::parse(1).unwrap().minor_units(), 1);
        assert!(Amount::parse(AMOUNT_MAX).is_ok());
        assert!(Amount::parse(AMOUNT_MAX + 1).is_err());
    }
}
