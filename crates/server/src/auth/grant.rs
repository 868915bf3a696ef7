//! What a request is allowed to do once authenticated.

use std::time::{Duration, SystemTime};

use sluice_protocol::subject::FilterSet;

use super::error::AuthError;

/// Which side of the hub a request is on; each has its own keys and grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Reading events (`GET`, Server-Sent Events).
    Subscribe,
    /// Writing events (`POST`).
    Publish,
    /// Administering streams (`/admin/…`): needs a token whose `sluice` claim has
    /// `"admin": true`, and grants no topic.
    Admin,
}

/// The topics one authenticated request may use, for one direction, until its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    direction: Direction,
    scope: Scope,
    expires_at: Option<SystemTime>,
    subject: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    /// Authorization is not configured for this direction.
    Everything,
    /// Only filters inside one of these.
    Filters(FilterSet),
}

impl Grant {
    /// Everything, forever: the direction has no authorization configured.
    pub(crate) fn unrestricted(direction: Direction) -> Self {
        Self {
            direction,
            scope: Scope::Everything,
            expires_at: None,
            subject: None,
        }
    }

    /// Exactly `filters`, until `expires_at`.
    pub(crate) fn limited(
        direction: Direction,
        filters: FilterSet,
        expires_at: Option<SystemTime>,
        subject: Option<String>,
    ) -> Self {
        Self {
            direction,
            scope: Scope::Filters(filters),
            expires_at,
            subject,
        }
    }

    /// The direction this grant was issued for.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// Whether this grant lets the client subscribe to `filter`.
    ///
    /// A wildcard request is allowed only when it is a subset of one granted filter: with a
    /// grant of `orders.>`, `orders.*` is allowed and `>` is not; with `orders.created`,
    /// `orders.*` is not. Always false for a grant issued for publishing.
    pub fn allows_subscribe(&self, filter: &str) -> bool {
        self.direction == Direction::Subscribe && self.covers(filter)
    }

    /// Whether this grant lets the client publish to `subject`.
    ///
    /// Always false for a grant issued for subscribing.
    pub fn allows_publish(&self, subject: &str) -> bool {
        self.direction == Direction::Publish && self.covers(subject)
    }

    /// Checks every requested filter; the first one not granted is the error (403).
    pub fn check_subscribe<'f>(
        &self,
        filters: impl IntoIterator<Item = &'f str>,
    ) -> Result<(), AuthError> {
        match filters.into_iter().find(|f| !self.allows_subscribe(f)) {
            Some(topic) => Err(AuthError::ForbiddenTopic {
                topic: topic.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Checks a publish subject (403 when not granted).
    pub fn check_publish(&self, subject: &str) -> Result<(), AuthError> {
        if self.allows_publish(subject) {
            Ok(())
        } else {
            Err(AuthError::ForbiddenTopic {
                topic: subject.to_owned(),
            })
        }
    }

    /// When the token stops being accepted (its `exp` plus the leeway); `None` for no expiry.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at
    }

    /// How long until [`Grant::expires_at`], zero once it has passed; `None` for no expiry.
    ///
    /// A stream should end when this elapses, telling the client to come back with a fresh
    /// token.
    pub fn expires_in(&self) -> Option<Duration> {
        self.expires_at.map(|at| {
            at.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        })
    }

    /// The token's `sub` claim, for logs.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    fn covers(&self, filter: &str) -> bool {
        match &self.scope {
            Scope::Everything => true,
            Scope::Filters(set) => set.covers(filter),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(direction: Direction, filters: &[&str], expires_at: Option<SystemTime>) -> Grant {
        let set = FilterSet::new(filters.iter().map(|f| (*f).to_owned())).expect("filters");
        Grant::limited(direction, set, expires_at, Some("user-1".into()))
    }

    #[test]
    fn a_grant_serves_only_its_own_direction() {
        let subscribe = limited(Direction::Subscribe, &["a.>"], None);
        assert_eq!(subscribe.direction(), Direction::Subscribe);
        assert!(subscribe.allows_subscribe("a.b"));
        assert!(!subscribe.allows_publish("a.b"));
        assert!(subscribe.check_publish("a.b").is_err());
        let publish = limited(Direction::Publish, &["a.>"], None);
        assert_eq!(publish.direction(), Direction::Publish);
        assert!(publish.allows_publish("a.b"));
        assert!(!publish.allows_subscribe("a.b"));
        assert_eq!(publish.check_publish("a.b"), Ok(()));
        assert_eq!(
            publish.check_publish("b"),
            Err(AuthError::ForbiddenTopic { topic: "b".into() })
        );
        assert_eq!(publish.subject(), Some("user-1"));
    }

    #[test]
    fn unrestricted_grants_cover_everything_forever() {
        for direction in [Direction::Subscribe, Direction::Publish] {
            let grant = Grant::unrestricted(direction);
            assert_eq!(
                grant.check_subscribe([">"]).is_ok(),
                direction == Direction::Subscribe
            );
            assert_eq!(
                grant.check_publish("any.thing").is_ok(),
                direction == Direction::Publish
            );
            assert_eq!(grant.expires_at(), None);
            assert_eq!(grant.expires_in(), None);
            assert_eq!(grant.subject(), None);
        }
    }

    #[test]
    fn check_subscribe_names_the_first_topic_not_granted() {
        let grant = limited(Direction::Subscribe, &["a.*"], None);
        assert_eq!(grant.check_subscribe(["a.b", "a.c"]), Ok(()));
        assert_eq!(
            grant.check_subscribe(["a.b", "a.>", "c"]),
            Err(AuthError::ForbiddenTopic {
                topic: "a.>".into()
            })
        );
    }

    #[test]
    fn expires_in_counts_down_to_zero() {
        let past = SystemTime::now() - Duration::from_secs(60);
        let grant = limited(Direction::Subscribe, &["a"], Some(past));
        assert_eq!(grant.expires_at(), Some(past));
        assert_eq!(grant.expires_in(), Some(Duration::ZERO));
        let future = SystemTime::now() + Duration::from_secs(3600);
        let left = limited(Direction::Subscribe, &["a"], Some(future))
            .expires_in()
            .expect("an expiry");
        assert!(left > Duration::from_secs(3500) && left <= Duration::from_secs(3600));
    }
}
