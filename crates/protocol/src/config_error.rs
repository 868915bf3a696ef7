//! A configuration value that is well-typed but not acceptable: what every part's check of its
//! own section answers with, naming the dotted key, the value as written and why.

/// A setting of a configuration section that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{key}` = {value}: {reason}")]
pub struct InvalidSetting {
    /// The dotted key, e.g. `fanout.ring_size`.
    pub key: String,
    /// The offending value, quoted as written.
    pub value: String,
    /// Why it is rejected.
    pub reason: String,
}

impl InvalidSetting {
    /// `key` = `value` (shown with `Debug`, so strings are quoted) is rejected for `reason`.
    pub fn new(
        key: impl Into<String>,
        value: impl std::fmt::Debug,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            value: format!("{value:?}"),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_key_and_quotes_the_value() {
        let err = InvalidSetting::new("embedded.sync", "soon", "use always, never or a duration");
        assert_eq!(
            err.to_string(),
            "invalid `embedded.sync` = \"soon\": use always, never or a duration"
        );
    }
}
