//! How a reader's session travels from the handler that opened it to the layer that writes the
//! connection: inside the handler's own response, so that no handler knows which transport
//! writes its stream.

use std::sync::{Arc, Mutex};

use super::Session;

/// A reader's session, carried by the response that starts its event stream (whose body is
/// empty). The layer that writes the connection takes it out and writes its frames: on the raw
/// HTTP/1.1 socket, on an HTTP/2 stream, or as hyper's HTTP/1 body.
///
/// Response extensions must be `Clone` and `Sync`, which a session is not: it sits in a cell
/// that the first [`StreamSession::take`] empties.
#[derive(Clone)]
pub struct StreamSession(Arc<Mutex<Option<Session>>>);

impl std::fmt::Debug for StreamSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSession").finish_non_exhaustive()
    }
}

impl StreamSession {
    /// `session`, to be carried by its response.
    pub fn new(session: Session) -> Self {
        Self(Arc::new(Mutex::new(Some(session))))
    }

    /// The session, once: `None` when it was taken already.
    pub fn take(&self) -> Option<Session> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
