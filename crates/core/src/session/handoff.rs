//! How the `GET /events` handler passes its session to the connection layer.

use std::sync::{Arc, Mutex};

use super::Session;

/// A request extension set when the connection layer writes the event stream itself: the
/// `GET /events` handler leaves its [`Session`] here instead of wrapping it in a body.
#[derive(Clone, Default)]
pub struct StreamHandoff(Arc<Mutex<Option<Session>>>);

impl std::fmt::Debug for StreamHandoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHandoff").finish_non_exhaustive()
    }
}

impl StreamHandoff {
    /// Leaves `session` for the connection layer.
    pub fn put(&self, session: Session) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(session);
    }

    /// Takes the session left by the handler, if it left one.
    pub fn take(&self) -> Option<Session> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
