//! Placeholder until the HTTP provider lands.
