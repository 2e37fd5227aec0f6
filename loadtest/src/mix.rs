//! The scenario mix of `--mix`: the scenarios an intent can follow, and
//! their relative weights with the text form they are given and printed in.

use std::fmt;
use std::str::FromStr;

/// The scenarios of the README's load-testing section, one per intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// One key, one request, retried with the same key until answered.
    Unique,
    /// Like `Unique`, but the first attempt gives up after a very short time,
    /// usually after the server has already committed.
    Timeout,
    /// Several identical attempts of one key at the same moment.
    Burst,
    /// The key is created, then sent again with a different amount.
    Reuse,
    /// The key is created, then replayed many times, in sequence and at once.
    Storm,
    /// The key is created, then replayed `--storm-size` times one after
    /// another: the replay path at the loop's own concurrency (benchmarks).
    Replay,
}

impl Scenario {
    /// Every scenario, in `--mix` order.
    pub const ALL: [Scenario; 6] = [
        Scenario::Unique,
        Scenario::Timeout,
        Scenario::Burst,
        Scenario::Reuse,
        Scenario::Storm,
        Scenario::Replay,
    ];

    /// The name used in `--mix` and the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Unique => "unique",
            Scenario::Timeout => "timeout",
            Scenario::Burst => "burst",
            Scenario::Reuse => "reuse",
            Scenario::Storm => "storm",
            Scenario::Replay => "replay",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Relative weights of the scenarios, e.g. `unique=70,timeout=10,burst=10,reuse=5,storm=5`.
/// A scenario left out has weight 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; 6],
}

impl Mix {
    /// Sum of the weights.
    pub fn total(&self) -> u64 {
        self.weights.iter().map(|&w| u64::from(w)).sum()
    }

    /// The weight of one scenario.
    pub fn weight(&self, s: Scenario) -> u32 {
        self.weights[s as usize]
    }

    /// The scenario a uniform draw `r` in `0..total()` falls on.
    pub fn pick(&self, r: u64) -> Scenario {
        let mut acc = 0u64;
        for s in Scenario::ALL {
            acc += u64::from(self.weight(s));
            if r < acc {
                return s;
            }
        }
        // Only reachable for r >= total(); the last weighted scenario is as good as any.
        Scenario::ALL
            .into_iter()
            .rev()
            .find(|&s| self.weight(s) > 0)
            .unwrap_or(Scenario::Unique)
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut weights = [0u32; Scenario::ALL.len()];
        let mut seen = [false; Scenario::ALL.len()];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not name=weight"))?;
            let name = name.trim();
            let scenario = Scenario::ALL
                .into_iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    format!(
                        "unknown scenario {name:?} (known: unique, timeout, burst, reuse, storm, replay)"
                    )
                })?;
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| format!("weight of {name} must be a whole number, got {weight:?}"))?;
            if weight > 1_000_000 {
                return Err(format!("weight of {name} must be at most 1000000"));
            }
            if std::mem::replace(&mut seen[scenario as usize], true) {
                return Err(format!("{name} appears twice"));
            }
            weights[scenario as usize] = weight;
        }
        let mix = Mix { weights };
        if mix.total() == 0 {
            return Err("at least one weight must be positive".into());
        }
        Ok(mix)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = Scenario::ALL
            .iter()
            .filter(|&&s| self.weight(s) > 0)
            .map(|&s| format!("{s}={}", self.weight(s)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_parses_the_documented_format() {
        let mix: Mix = "unique=70,timeout=10,burst=10,reuse=5,storm=5"
            .parse()
            .unwrap();
        assert_eq!(mix.total(), 100);
        assert_eq!(mix.weight(Scenario::Timeout), 10);
        assert_eq!(
            mix.to_string(),
            "unique=70,timeout=10,burst=10,reuse=5,storm=5"
        );
    }

    #[test]
    fn mix_allows_spaces_omissions_and_zero_weights() {
        let mix: Mix = " burst = 3 , storm=0,".parse().unwrap();
        assert_eq!(mix.total(), 3);
        assert_eq!(mix.weight(Scenario::Unique), 0);
        assert_eq!(mix.to_string(), "burst=3");
    }

    #[test]
    fn mix_rejects_bad_input() {
        for bad in [
            "",
            "unique=0",
            "unique",
            "unique=-1",
            "unique=x",
            "bogus=1",
            "unique=1,unique=2",
            "unique=2000000",
        ] {
            assert!(bad.parse::<Mix>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn mix_pick_follows_the_weights() {
        let mix: Mix = "unique=2,burst=1,storm=1".parse().unwrap();
        let picks: Vec<_> = (0..mix.total()).map(|r| mix.pick(r)).collect();
        assert_eq!(
            picks,
            [
                Scenario::Unique,
                Scenario::Unique,
                Scenario::Burst,
                Scenario::Storm
            ]
        );
        // Never a zero-weight scenario, even out of range.
        assert_eq!(mix.pick(99), Scenario::Storm);
    }
}
