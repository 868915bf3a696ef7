//! The JetStream message model shared by sluice's embedded store and its hub.
//!
//! Everything here is pure: parsing, validation and encoding of the vocabulary that both the
//! embedded store and a NATS JetStream server understand, so that moving between the two
//! backends changes nothing for users.

pub mod headers;
