//! The JetStream message model shared by sluice's embedded store and its hub.
//!
//! Everything here is pure: parsing, validation and encoding of the vocabulary that both the
//! embedded store and a NATS JetStream server understand, so that moving between the two
//! backends changes nothing for users.
//!
//! - [`subject`]: subjects, filters (`*`, `>`), matching, subset and overlap, [`subject::FilterSet`];
//! - [`subject_index`]: filters mapped to keys, answering which keys' filters match a subject;
//! - [`headers`]: message headers and the `NATS/1.0` header block, well-known header names;
//! - [`error`]: JetStream API errors with their codes;
//! - [`duration`]: Go-style durations (`1h2m3.5s`), as NATS headers write them;
//! - [`config_duration`], [`config_choice`], [`config_error`]: durations and one-of-a-few-words
//!   values as sluice's configuration files write them (`"1m 30s"`, `"live"`), and the error a
//!   section's check answers with;
//! - [`transform`]: subject transforms (`{src, dest}` with `$N`, `{{wildcard(N)}}`, `*`, `>`);
//! - [`ttl`]: the `Nats-TTL` header;
//! - [`schedule`]: the `Nats-Schedule` header (`@at`, `@every`, cron) and its next run.
//!
//! Every error names the offending value and says what is wrong with it; no input makes any
//! function here panic.

pub mod config_choice;
pub mod config_duration;
pub mod config_error;
pub mod duration;
pub mod error;
pub mod headers;
mod quote;
pub mod schedule;
pub mod subject;
pub mod subject_index;
pub mod transform;
pub mod ttl;
