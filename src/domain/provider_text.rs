//! Text that came from the payment provider (references, decline reasons,
//! error excerpts). A provider is outside our control: its strings may hold
//! NUL bytes (which Postgres refuses in `text`, failing every settlement of
//! the row), other control characters, or megabytes. Once parsed here they
//! are safe to store, log and show.

use std::fmt;

/// Most characters of provider text kept.
pub const PROVIDER_TEXT_CHARS_MAX: usize = 255;

/// Provider text with control characters removed and at most
/// [`PROVIDER_TEXT_CHARS_MAX`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderText(String);

impl ProviderText {
    /// Cleans any text: control characters (NUL, newlines, escapes, …) go,
    /// and the rest is cut to [`PROVIDER_TEXT_CHARS_MAX`] characters. Never fails.
    pub fn clean(raw: &str) -> Self {
        let text: String = raw
            .chars()
            .filter(|c| !c.is_control())
            .take(PROVIDER_TEXT_CHARS_MAX)
            .collect();
        assert!(text.chars().count() <= PROVIDER_TEXT_CHARS_MAX);
        assert!(!text.contains('\0'));
        Self(text)
    }

    /// The cleaned text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProviderText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_go_and_length_is_bounded() {
        assert_eq!(
            ProviderText::clean("ok\0 ref\n\u{1b}[31m").as_str(),
            "ok ref[31m"
        );
        let long = "é".repeat(1000);
        let t = ProviderText::clean(&long);
        assert_eq!(t.as_str().chars().count(), PROVIDER_TEXT_CHARS_MAX);
        assert_eq!(ProviderText::clean("sim_123").as_str(), "sim_123");
    }
}
