//! sluice's embedded durable stream store.
//!
//! Streams follow JetStream's model (subjects, sequences, limits, TTL, schedules, dedupe,
//! sourcing) and live in append-only, checksummed block files laid out like nats-server's
//! file store.
