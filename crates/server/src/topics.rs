//! The topics of a subscription: from `?topic=` (repeatable) or the `/events/<topic>` path,
//! validated as NATS filters (`*` and `>` allowed), prefixed with `topic_prefix`, bounded in
//! number and checked against the subjects the stream captures.

use sluice_protocol::subject::{FilterSet, filter_is_subset};

use crate::config::Config;

/// A validated subscription: what the client asked for, and the filters its feed is keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// The client topics, without prefix, de-duplicated in request order.
    pub topics: Vec<String>,
    /// The stream filters (with prefix) in canonical form: the key of the shared feed.
    pub filters: FilterSet,
}

/// Why a subscription's topics are rejected (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// No topic was given.
    #[error("at least one topic is required (?topic=… or /events/<topic>)")]
    Missing,
    /// More topics than `limits.max_topics_per_subscription`.
    #[error("{count} topics requested, at most {max} are allowed per subscription")]
    TooMany {
        /// How many were requested (counting stops at `max + 1`).
        count: usize,
        max: usize,
    },
    /// A topic is not a valid NATS subject filter.
    #[error("invalid topic {topic:?}: {reason}")]
    Invalid {
        /// The topic as given.
        topic: String,
        reason: String,
    },
    /// A topic selects subjects the stream does not capture.
    #[error("topic {topic:?} is outside the stream's subjects {subjects:?}")]
    OutsideStream {
        /// The topic as given.
        topic: String,
        subjects: Vec<String>,
    },
}

/// Validates `requested` topics; stops reading after `max + 1` of them.
pub fn parse<'a>(
    requested: impl IntoIterator<Item = &'a str>,
    config: &Config,
) -> Result<Topics, TopicError> {
    let max = config.limits.max_topics_per_subscription;
    let mut topics: Vec<String> = Vec::new();
    for (index, topic) in requested.into_iter().enumerate() {
        if index >= max {
            return Err(TopicError::TooMany {
                count: index + 1,
                max,
            });
        }
        if !topics.iter().any(|t| t == topic) {
            topics.push(topic.to_owned());
        }
    }
    if topics.is_empty() {
        return Err(TopicError::Missing);
    }
    let mut subjects = Vec::with_capacity(topics.len());
    for topic in &topics {
        if topic.is_empty() {
            return Err(TopicError::Invalid {
                topic: topic.clone(),
                reason: "a topic is not empty".to_owned(),
            });
        }
        let subject = config.subject_for(topic);
        FilterSet::new([subject.as_str()]).map_err(|err| TopicError::Invalid {
            topic: topic.clone(),
            reason: err.to_string(),
        })?;
        subjects.push(subject);
    }
    let filters = FilterSet::new(subjects).map_err(|err| TopicError::Invalid {
        topic: topics.join(","),
        reason: err.to_string(),
    })?;
    Ok(Topics { topics, filters })
}

/// The topics of a `/events/<path>` request: slashes separate tokens like dots do.
pub fn from_path(path: &str) -> String {
    path.trim_matches('/').replace('/', ".")
}

/// Checks that every filter lies inside one of the stream's subjects.
pub fn check_within(
    topics: &Topics,
    stream_subjects: &[String],
    config: &Config,
) -> Result<(), TopicError> {
    for (topic, filter) in topics.topics.iter().map(|t| (t, config.subject_for(t))) {
        if !stream_subjects.iter().any(|s| filter_is_subset(&filter, s)) {
            return Err(TopicError::OutsideStream {
                topic: topic.clone(),
                subjects: stream_subjects.to_vec(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(prefix: &str, max: usize) -> Config {
        let mut config = Config {
            topic_prefix: prefix.to_owned(),
            ..Config::default()
        };
        config.limits.max_topics_per_subscription = max;
        config
    }

    #[test]
    fn prefixes_dedupes_and_allows_wildcards() {
        let topics = parse(["a.*", "b.>", "a.*"], &config("app", 32)).expect("valid");
        assert_eq!(topics.topics, vec!["a.*", "b.>"]);
        assert_eq!(topics.filters.as_slice(), ["app.a.*", "app.b.>"]);
    }

    #[test]
    fn rejects_bad_missing_and_too_many() {
        let config = config("", 2);
        assert_eq!(parse([], &config), Err(TopicError::Missing));
        assert!(matches!(
            parse(["a", "b", "c"], &config),
            Err(TopicError::TooMany { count: 3, max: 2 })
        ));
        for bad in ["a..b", ".a", "a b", ">.a", "a\nb", ""] {
            assert!(
                matches!(parse([bad], &config), Err(TopicError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn subjects_outside_the_stream_are_rejected() {
        let config = config("", 32);
        let inside = parse(["orders.eu"], &config).unwrap();
        assert!(check_within(&inside, &["orders.>".into()], &config).is_ok());
        let outside = parse(["users.1"], &config).unwrap();
        assert!(check_within(&outside, &["orders.>".into()], &config).is_err());
        let wider = parse([">"], &config).unwrap();
        assert!(check_within(&wider, &["orders.>".into()], &config).is_err());
    }

    #[test]
    fn path_slashes_become_dots() {
        assert_eq!(from_path("a/b/c"), "a.b.c");
        assert_eq!(from_path("a.b"), "a.b");
    }
}
