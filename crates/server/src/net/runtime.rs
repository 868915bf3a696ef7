//! Where an HTTP/1.1 event stream on the plain listener runs: the streams' own runtime for
//! the readers of big feeds, the request runtime for the others. (A stream over TLS or
//! HTTP/2 stays beside its connection, whose task every write goes through.)
//!
//! A published message wakes every session of its feed; with thousands of sessions those
//! wake-ups fill the run queues, and a `POST /publish` (or a probe) that shares the queues waits
//! behind all of them, which throttles the publishers. The sessions of a big feed therefore
//! run on worker threads of their own: the operating system shares the cores between the two
//! runtimes, so requests and the store keep their turn however many sessions are awake.
//!
//! A feed with few readers (a topic per user or per document) wakes few sessions per
//! message, and there the hand-off between runtimes was most of the cost of a delivery: the
//! publisher's thread stored the message, then woke a thread of the other runtime to route
//! and write it. Its sessions run on the request runtime, beside the dispatch: a message is
//! stored, routed and written on the publisher's thread, with no other thread woken.

use std::io;

use tokio::runtime::Handle;

use crate::owned_runtime::OwnedRuntime;

use sluice_core::session::Session;

/// The most readers a feed may have for a new session of it to run on the request runtime.
/// A session stays where it started, so a feed that grows has its first readers there and
/// the rest on the streams' runtime.
const FEW_READERS: usize = 16;

/// The runtime a new event stream of `session` runs on: the current (request) runtime when
/// its feed has few readers, else `streams`.
pub fn for_session(streams: &Handle, session: &Session) -> Handle {
    if has_few_readers(session.feed_readers()) {
        Handle::current()
    } else {
        streams.clone()
    }
}

fn has_few_readers(readers: usize) -> bool {
    readers <= FEW_READERS
}

/// The streams' own runtime: one worker thread per available core.
pub type StreamRuntime = OwnedRuntime;

/// Starts the streams' runtime.
pub fn start_streams() -> io::Result<StreamRuntime> {
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    OwnedRuntime::start_named(threads, "sluice-streams")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_readers_of_small_feeds_run_beside_requests() {
        assert!(has_few_readers(1));
        assert!(has_few_readers(FEW_READERS));
        assert!(!has_few_readers(FEW_READERS + 1));
        assert!(!has_few_readers(10_000));
    }
}
