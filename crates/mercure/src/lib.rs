//! The Mercure protocol, without HTTP and without I/O: what sluice's hub needs to speak Mercure
//! (the stable 0.x line and the 1.0 draft) on top of its durable streams.
//!
//! - [`selector`]: topic selectors from `topic=` (`*`, exact, RFC 6570 URI Templates as Mercure
//!   matches them), `match=` / `match_exact=` and `match_urlpattern=` (WHATWG URL Pattern),
//!   compiled once, matched many times;
//! - [`set`]: a subscription's selectors with a normalised key, so that connections asking for
//!   the same selectors share one feed, and [`SelectorSet::matches_any`] over an update's topics;
//! - [`form`]: the publish form decoded into an [`Update`];
//! - [`claims`]: the `mercure` claim and the 1.0 draft's access-token authorization details, on
//!   already verified claims: [`Grants::can_publish`], [`Grants::can_receive`];
//! - [`mapping`]: how an update is stored as a stream message (subject, headers, payload) and
//!   read back, which subject filters a selector set reads, and how resume ids map to positions;
//! - [`subscription`]: the active-subscription JSON-LD documents.
//!
//! Every limit is a documented constant; every error names the parameter or field and shows the
//! value; no input makes anything here panic.
//!
//! ```
//! use sluice_mercure::{DEFAULT_BASE_URL, Grants, Scheme, SelectorSet, form};
//!
//! // A subscriber asks for a URI Template; a publisher posts a form.
//! let set = SelectorSet::from_query([("topic", "https://example.com/books/{id}")], DEFAULT_BASE_URL)?;
//! let update = form::decode(b"topic=https%3A%2F%2Fexample.com%2Fbooks%2F1&data=hello%0Aworld")?;
//! assert!(set.matches_any(&update.topic_refs()));
//! assert!(Grants::none().can_receive(&update), "a public update");
//!
//! // Stored as a message, it reads back the same.
//! let scheme = Scheme::new("mercure")?;
//! let stored = scheme.encode(&update);
//! let headers = stored.headers.iter().map(|(name, value)| (*name, value.as_str()));
//! assert_eq!(scheme.decode(&stored.subject, headers, &stored.payload)?, update);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod claims;
pub mod form;
pub mod mapping;
pub mod pattern;
pub mod selector;
pub mod set;
pub mod subscription;
mod template;
mod text;
mod update;

pub use claims::{Claims, Grants};
pub use mapping::{LastEventId, Scheme, StoredForm};
pub use selector::{DEFAULT_BASE_URL, Selector, SelectorError, SelectorKind};
pub use set::{SelectorSet, SetKey};
pub use update::Update;
