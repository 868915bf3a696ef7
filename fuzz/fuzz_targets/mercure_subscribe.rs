//! What `GET /.well-known/mercure` reads from a request, end to end without I/O: the query
//! string split as the hub splits it (`form_urlencoded`, as axum's `Query`) into a
//! `SelectorSet`, the subject filters the subscription reads, and the resume id (the
//! `Last-Event-ID` header, else `lastEventID`, else `last_event_id`).
//!
//! Checked: nothing panics; the same parameters in reverse order are accepted exactly when the
//! original are and key the same feed, and so are the parameters given twice (within the
//! selector limit); every filter of an accepted set is a valid subject filter under the prefix
//! (the subscription is never refused for its own filters), and reads every update the set
//! selects, with one topic or as an alternate, hub-made id or custom. A resume id is `earliest`
//! exactly when it is that text; a hub-made `#<position>` whose position parses formats back
//! to the same text; a custom id never starts with `#`, and its lookup filter lies under the
//! prefix and reads the updates stored with that id.
//!
//! Input: `<query string>\n<Last-Event-ID header>\n<topic>\n<topic>…`; without a second line
//! the request has no header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::split_line;
use sluice_mercure::form::EARLIEST;
use sluice_mercure::mapping::hub_id;
use sluice_mercure::set::{MAX_SELECTORS, SetError};
use sluice_mercure::{DEFAULT_BASE_URL, LastEventId, Scheme, SelectorSet, Update};
use sluice_protocol::subject::{FilterSet, filter_is_subset};
use sluice_server::fuzzing::EventId;

/// The hub's default `mercure.subject_prefix`.
const PREFIX: &str = "mercure";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (query, rest) = split_line(text);
    let (header, topics) = match rest {
        Some(rest) => {
            let (header, topics) = split_line(rest);
            (Some(header), topics.unwrap_or_default())
        }
        None => (None, ""),
    };
    let topics: Vec<&str> = topics
        .split('\n')
        .filter(|t| !t.is_empty())
        .take(8)
        .collect();
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let scheme = Scheme::new(PREFIX).expect("the default prefix");

    check_selectors(&scheme, &pairs, &topics);
    let resume = header.map(str::to_owned).or_else(|| {
        ["lastEventID", "last_event_id"].iter().find_map(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    });
    if let Some(resume) = resume {
        check_resume(&scheme, &resume, &topics);
    }
});

fn set_of<'a>(pairs: impl Iterator<Item = &'a (String, String)>) -> Option<SelectorSet> {
    let pairs = pairs.map(|(k, v)| (k.as_str(), v.as_str()));
    SelectorSet::from_query(pairs, DEFAULT_BASE_URL).ok()
}

fn check_selectors(scheme: &Scheme, pairs: &[(String, String)], topics: &[&str]) {
    let set = set_of(pairs.iter());
    let reversed = set_of(pairs.iter().rev());
    assert_eq!(
        set.as_ref().map(SelectorSet::key),
        reversed.as_ref().map(SelectorSet::key),
        "the order of the parameters changes nothing"
    );
    let Some(set) = set else { return };
    assert!(!set.selectors().is_empty() && set.selectors().len() <= MAX_SELECTORS);
    // Within the selector limit, the parameters given twice are the same set.
    let twice = pairs
        .iter()
        .chain(pairs)
        .map(|(k, v)| (k.as_str(), v.as_str()));
    match SelectorSet::from_query(twice, DEFAULT_BASE_URL) {
        Ok(twice) => assert_eq!(
            twice.key(),
            set.key(),
            "repeating the parameters changes nothing"
        ),
        Err(SetError::TooMany { .. }) => {}
        Err(err) => panic!("accepted once, refused twice: {err}"),
    }

    let wide = scheme.wide_filter();
    let filters = scheme.filters(&set);
    for filter in &filters {
        assert!(
            filter_is_subset(filter, &wide),
            "{filter:?} outside {wide:?}"
        );
    }
    let filters = FilterSet::new(filters).expect("a set's filters are valid filters");
    for topic in topics {
        if !set.matches_any(&[topic]) {
            continue;
        }
        for update in updates_on(topic) {
            let subject = scheme.subject(&update);
            assert!(
                filters.matches(&subject),
                "{subject:?} of {update:?} is selected but not read by {filters:?}"
            );
        }
    }
}

/// Updates with `topic`: alone or as an alternate, with a hub-made or a custom id.
fn updates_on(topic: &str) -> [Update; 3] {
    let update = |topics: Vec<String>, id: Option<&str>| Update {
        topics,
        data: String::new(),
        private: false,
        id: id.map(str::to_owned),
        event_type: None,
        retry: None,
    };
    [
        update(vec![topic.to_owned()], None),
        update(vec![topic.to_owned()], Some("custom")),
        update(
            vec!["https://example.com/canonical".into(), topic.to_owned()],
            None,
        ),
    ]
}

fn check_resume(scheme: &Scheme, resume: &str, topics: &[&str]) {
    match LastEventId::classify(resume) {
        LastEventId::Earliest => assert_eq!(resume, EARLIEST),
        LastEventId::Position(position) => {
            assert_eq!(format!("#{position}"), resume);
            if let Ok(id) = EventId::parse(position) {
                assert_eq!(hub_id(id), resume, "a hub-made id is canonical");
            }
        }
        LastEventId::Custom(id) => {
            assert_eq!(id, resume);
            assert!(!id.starts_with('#') && id != EARLIEST, "{id:?}");
            let filter = scheme.id_filter(id);
            assert!(
                filter_is_subset(&filter, &scheme.wide_filter()),
                "{filter:?}"
            );
            let filters = FilterSet::new([filter]).expect("a custom id's filter is valid");
            for topic in std::iter::once(&"https://example.com/books/1").chain(topics) {
                let update = Update {
                    topics: vec![(*topic).to_owned()],
                    data: String::new(),
                    private: false,
                    id: Some(id.to_owned()),
                    event_type: None,
                    retry: None,
                };
                let subject = scheme.subject(&update);
                assert!(
                    filters.matches(&subject),
                    "{subject:?} not read by {filters:?}"
                );
            }
        }
    }
}
