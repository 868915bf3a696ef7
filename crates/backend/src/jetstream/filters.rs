//! How a set of subscription filters is expressed to the server: one filter, several
//! (`filter_subjects`), or one common filter with the rest done in-process when the server
//! cannot be trusted with the set as it is.
//!
//! Servers before 2.10 take one filter per consumer; servers before 2.14.7 take several but
//! may skip messages on such consumers, so sluice does not ask them to.

use sluice_protocol::subject::{FilterSet, filters_overlap};

use crate::{ApiError, BackendError};

/// A nats-server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion(pub u64, pub u64, pub u64);

impl ServerVersion {
    /// The first servers taking several filters per consumer.
    pub const MULTI_FILTER: Self = Self(2, 10, 0);
    /// The first servers not known to skip messages on multi-filter consumers; older ones
    /// get one common filter and in-process filtering.
    pub const MULTI_FILTER_FIXED: Self = Self(2, 14, 7);
    /// The first servers with message schedules (`allow_msg_schedules`, ADR-51).
    pub(crate) const SCHEDULES: Self = Self(2, 12, 0);

    /// Parses `2.10.4`, `2.11.0-RC.1` and the like; missing or odd parts count as 0.
    pub fn parse(text: &str) -> Self {
        let mut parts = text.split('.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        });
        Self(
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        )
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What the consumer asks the server to filter, and what is left to filter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FilterPlan {
    /// The subscription's filters, canonical.
    pub requested: FilterSet,
    /// The consumer's `filter_subject` (empty: every subject of the stream).
    pub filter_subject: String,
    /// The consumer's `filter_subjects` (servers ≥ 2.14.7; empty when unused).
    pub filter_subjects: Vec<String>,
    /// Filters applied in-process to what the server delivers, when it cannot apply them.
    pub local: Option<FilterSet>,
}

impl FilterPlan {
    /// Plans `filters` for a server of `version`.
    pub fn new(filters: &[String], version: ServerVersion) -> Result<Self, BackendError> {
        let set = FilterSet::new(filters.iter().cloned())
            .map_err(|err| ApiError::bad_request().described(err.to_string()))?;
        let all = set.as_slice();
        match all {
            [] => Err(ApiError::bad_request()
                .described("a subscription needs at least one filter")
                .into()),
            [one] => Ok(Self {
                filter_subject: one.clone(),
                filter_subjects: Vec::new(),
                local: None,
                requested: set.clone(),
            }),
            // The server rejects overlapping filters; older servers take one or skip messages.
            _ if version >= ServerVersion::MULTI_FILTER_FIXED && !any_overlap(all) => Ok(Self {
                filter_subject: String::new(),
                filter_subjects: all.to_vec(),
                local: None,
                requested: set.clone(),
            }),
            _ => Ok(Self {
                filter_subject: common_filter(all),
                filter_subjects: Vec::new(),
                local: Some(set.clone()),
                requested: set,
            }),
        }
    }

    /// The first filter that can match no subject of a stream capturing `subjects`, which the
    /// server would accept and never deliver to; `None` when every filter can match, or when
    /// the stream declares no subjects (it only mirrors or sources others).
    pub fn outside<'a>(&'a self, subjects: &[String]) -> Option<&'a str> {
        if subjects.is_empty() {
            return None;
        }
        self.requested.iter().find(|filter| {
            !subjects
                .iter()
                .any(|subject| filters_overlap(filter, subject))
        })
    }
}

fn any_overlap(filters: &[String]) -> bool {
    filters
        .iter()
        .enumerate()
        .any(|(i, a)| filters[i + 1..].iter().any(|b| filters_overlap(a, b)))
}

/// The narrowest single filter covering all of `filters`: their shared leading literal tokens
/// followed by `>`, or empty (the whole stream) when they share none.
fn common_filter(filters: &[String]) -> String {
    let tokenised: Vec<Vec<&str>> = filters.iter().map(|f| f.split('.').collect()).collect();
    // Stop one token short of the shortest filter, so `>` has a token to match in each.
    let limit = tokenised
        .iter()
        .map(Vec::len)
        .min()
        .unwrap_or(0)
        .saturating_sub(1);
    let first = &tokenised[0];
    let shared = (0..limit)
        .take_while(|&i| {
            let token = first[i];
            token != "*" && token != ">" && tokenised.iter().all(|t| t[i] == token)
        })
        .count();
    if shared == 0 {
        String::new()
    } else {
        format!("{}.>", first[..shared].join("."))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::strategy::Strategy;

    use super::*;

    /// The plan of `filters` on a server of `version`.
    pub(in crate::jetstream) fn plan(filters: &[&str], version: ServerVersion) -> FilterPlan {
        let filters: Vec<String> = filters.iter().map(|f| (*f).to_owned()).collect();
        FilterPlan::new(&filters, version).unwrap()
    }

    /// A server with multi-filter consumers.
    pub(in crate::jetstream) const NEW: ServerVersion = ServerVersion(2, 15, 1);
    const SKIPPING: ServerVersion = ServerVersion(2, 14, 6);
    /// Debian's, without them.
    pub(in crate::jetstream) const OLD: ServerVersion = ServerVersion(2, 9, 10);

    #[test]
    fn versions_parse_leniently() {
        assert_eq!(ServerVersion::parse("2.15.1"), ServerVersion(2, 15, 1));
        assert_eq!(ServerVersion::parse("2.11.0-RC.1"), ServerVersion(2, 11, 0));
        assert_eq!(ServerVersion::parse("garbage"), ServerVersion(0, 0, 0));
        assert!(ServerVersion(2, 14, 6) < ServerVersion::MULTI_FILTER_FIXED);
    }

    #[test]
    fn one_filter_goes_to_the_server() {
        let plan = plan(&["a.b", "a.b"], OLD);
        assert_eq!(plan.filter_subject, "a.b");
        assert!(plan.local.is_none());
    }

    #[test]
    fn disjoint_filters_go_to_new_servers() {
        let plan = plan(&["a.x", "b.*"], NEW);
        assert_eq!(plan.filter_subjects, ["a.x", "b.*"]);
        assert!(plan.filter_subject.is_empty() && plan.local.is_none());
    }

    #[test]
    fn servers_that_may_skip_messages_get_no_multi_filter_consumer() {
        let plan = plan(&["a.x", "b.*"], SKIPPING);
        assert!(plan.filter_subjects.is_empty());
        assert!(plan.local.is_some());
    }

    #[test]
    fn old_servers_get_a_common_filter_and_local_filtering() {
        let plan = plan(&["orders.eu.new", "orders.us.*"], OLD);
        assert_eq!(plan.filter_subject, "orders.>");
        let local = plan.local.unwrap();
        assert!(local.matches("orders.us.x") && !local.matches("orders.eu.old"));
    }

    #[test]
    fn overlapping_filters_are_filtered_locally_even_on_new_servers() {
        let plan = plan(&["a.*", "*.b"], NEW);
        assert_eq!(plan.filter_subject, "");
        assert!(plan.local.is_some());
    }

    #[test]
    fn common_filter_leaves_a_token_for_the_wildcard() {
        assert_eq!(common_filter(&["a".into(), "a.b".into()]), "");
        assert_eq!(common_filter(&["a.b.c".into(), "a.b.d".into()]), "a.b.>");
        assert_eq!(common_filter(&["a.*.c".into(), "a.*.d".into()]), "a.>");
        assert_eq!(common_filter(&["x.y".into(), "z.y".into()]), "");
    }

    #[test]
    fn filters_outside_the_streams_subjects_are_found() {
        let plan = plan(&["orders.*", "users.>"], NEW);
        let stream = ["orders.>".to_owned()];
        assert_eq!(plan.outside(&stream), Some("users.>"));
        assert_eq!(plan.outside(&["*.>".to_owned()]), None);
        assert_eq!(plan.outside(&[]), None);
    }

    #[test]
    fn bad_filters_are_bad_requests() {
        let err = FilterPlan::new(&["a..b".to_owned()], NEW).unwrap_err();
        assert!(
            matches!(err, BackendError::Api(ApiError { status: 400, .. })),
            "{err:?}"
        );
        let err = FilterPlan::new(&[], NEW).unwrap_err();
        assert!(
            matches!(err, BackendError::Api(ApiError { status: 400, .. })),
            "{err:?}"
        );
    }

    /// One of `choices`, as a string.
    fn token(choices: &'static [&'static str]) -> impl Strategy<Value = String> {
        proptest::sample::select(choices).prop_map(str::to_owned)
    }

    /// A filter of 1-3 tokens over a small alphabet, `>` only last; small, so that sets with
    /// shared prefixes and subjects at their edges come up often.
    fn filter_strategy() -> impl Strategy<Value = String> {
        (
            proptest::collection::vec(token(&["a", "b", "*"]), 0..3),
            token(&["a", "b", "*", ">"]),
        )
            .prop_map(|(mut tokens, last)| {
                tokens.push(last);
                tokens.join(".")
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Whatever the plan asks of the server, followed by the in-process filter, delivers
        /// exactly the subjects the subscription's filters match, on every server version.
        #[test]
        fn plans_deliver_exactly_what_the_filters_match(
            filters in proptest::collection::vec(filter_strategy(), 1..4),
            subject in proptest::collection::vec(token(&["a", "b", "c"]), 1..5)
                .prop_map(|tokens| tokens.join(".")),
            version in proptest::sample::select(&[OLD, SKIPPING, NEW][..]),
        ) {
            use sluice_protocol::subject::filter_matches;
            let wanted = FilterSet::new(filters.iter().cloned()).unwrap().matches(&subject);
            let plan = FilterPlan::new(&filters, version).unwrap();
            let server = if !plan.filter_subjects.is_empty() {
                plan.filter_subjects.iter().any(|f| filter_matches(f, &subject))
            } else {
                plan.filter_subject.is_empty() || filter_matches(&plan.filter_subject, &subject)
            };
            let local = plan.local.as_ref().is_none_or(|set| set.matches(&subject));
            proptest::prop_assert_eq!(server && local, wanted, "plan {:?}", plan);
        }
    }
}
