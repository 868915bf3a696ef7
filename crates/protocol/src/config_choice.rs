//! A configuration value that is one of a few words, as sluice's configuration files write them
//! (`on_loss = "live"`): anything else is refused, listing the words.

use serde::{Deserializer, de};

/// Deserializes one of the words of `choices`; anything else is refused listing them.
pub fn choice<'de, D: Deserializer<'de>, T: Copy>(
    deserializer: D,
    choices: &'static [(&'static str, T)],
) -> Result<T, D::Error> {
    struct Choice<T: 'static>(&'static [(&'static str, T)]);
    impl<T: 'static> Choice<T> {
        fn list(&self) -> String {
            let names: Vec<String> = self.0.iter().map(|(name, _)| format!("`{name}`")).collect();
            format!("one of {}", names.join(", "))
        }
    }
    impl<T: Copy + 'static> de::Visitor<'_> for Choice<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.list())
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            self.0
                .iter()
                .find(|(name, _)| *name == text)
                .map(|(_, value)| *value)
                .ok_or_else(|| E::custom(format!("expected {}", self.list())))
        }
    }
    deserializer.deserialize_any(Choice(choices))
}
