//! The JetStream message model shared by sluice's embedded store and its hub.
//!
//! Everything here is pure: parsing, validation and encoding of the vocabulary that both the
//! embedded store and a NATS JetStream server understand, so that moving between the two
//! backends changes nothing for users.
//!
//! - [`subject`]: subjects, filters (`*`, `>`), matching, subset and overlap, [`subject::FilterSet`];
//! - [`headers`]: message headers and the `NATS/1.0` header block, well-known header names;
//! - [`error`]: JetStream API errors with their codes.

pub mod error;
pub mod headers;
pub mod subject;
