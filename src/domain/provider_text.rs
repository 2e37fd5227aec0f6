//! Text that came from the payment provider (references, decline reasons,
//! error excerpts). A provider is outside our control: its strings may hold
//! NUL bytes (which Postgres refuses in `text`, failing every settlement of
//! the row), other control characters, characters that reorder or hide
//! text (bidirectional overrides and isolates, zero-width characters: in an
//! operator's console or terminal a reference with a right-to-left override
//! reads as another reference), or megabytes. Once parsed here they are
//! safe to store, log and show.

use std::fmt;

/// Most characters of provider text kept.
pub const PROVIDER_TEXT_CHARS_MAX: usize = 255;

/// Provider text with control and invisible formatting characters removed
/// and at most [`PROVIDER_TEXT_CHARS_MAX`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderText(String);

impl ProviderText {
    /// Cleans any text: control characters (NUL, newlines, escapes, …) and
    /// invisible formatting characters ([`is_invisible_format`]) go, and the
    /// rest is cut to [`PROVIDER_TEXT_CHARS_MAX`] characters. Never fails.
    pub fn clean(raw: &str) -> Self {
        let text: String = raw
            .chars()
            .filter(|c| !c.is_control() && !is_invisible_format(*c))
            .take(PROVIDER_TEXT_CHARS_MAX)
            .collect();
        assert!(text.chars().count() <= PROVIDER_TEXT_CHARS_MAX);
        assert!(!text.contains('\0'));
        assert!(!text.chars().any(is_invisible_format));
        Self(text)
    }

    /// The cleaned text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Characters that change how the text around them is shown without being
/// seen themselves: bidirectional marks, embeddings, overrides and isolates
/// (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069), and zero-width
/// characters (U+200B-U+200D, U+2060-U+2064, U+FEFF). None belongs in a
/// payment reference or a decline reason.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
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

    #[test]
    fn characters_that_reorder_or_hide_text_go() {
        // With the override, "ref_123" then "lanac" is shown as "ref_123canal".
        assert_eq!(
            ProviderText::clean("ref_123\u{202E}lanac").as_str(),
            "ref_123lanac"
        );
        assert_eq!(
            ProviderText::clean("\u{FEFF}sim\u{200B}_1\u{2066}2\u{2069}\u{200F}").as_str(),
            "sim_12"
        );
        // Letters of right-to-left scripts stay: only the invisible marks go.
        assert_eq!(ProviderText::clean("رفض").as_str(), "رفض");
        assert_eq!(ProviderText::clean("ref é ü").as_str(), "ref é ü");
    }
}
