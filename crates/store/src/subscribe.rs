//! Subscriptions: replay from a position, then follow live, paced by the consumer.

use futures::Stream;

use crate::error::{Result, StoreError};
use crate::proto::FilterSet;
use crate::stream::StreamHandle;
use crate::types::StoredMessage;

impl StreamHandle {
    /// Every message with sequence ≥ `start_seq` matching `filter`: what is stored, then new
    /// messages as they become durable, with no gap and no duplicate between the two. Nothing
    /// is read ahead: each message is read from the store when the consumer polls for it. The
    /// stream ends with an error when the stream is closed or deleted.
    pub fn subscribe(
        &self,
        start_seq: u64,
        filter: FilterSet,
    ) -> impl Stream<Item = Result<StoredMessage>> + Send + 'static {
        let shared = self.shared.clone();
        let rx = shared.visible.subscribe();
        let start = start_seq.max(1);
        futures::stream::unfold(Some((shared, rx, start, filter)), |cursor| async move {
            let (shared, mut rx, next, filter) = cursor?;
            loop {
                rx.borrow_and_update();
                let found = {
                    let mut st = shared.lock();
                    if st.closed {
                        Err(StoreError::Closed(shared.name.clone()))
                    } else {
                        st.next_matching(next, &filter)
                    }
                }
                .and_then(|pending| pending.map(|p| p.finish()).transpose());
                match found {
                    Ok(Some(m)) => {
                        let after = m.seq + 1;
                        return Some((Ok(m), Some((shared, rx, after, filter))));
                    }
                    Ok(None) => {}
                    Err(e) => return Some((Err(e), None)),
                }
                if rx.changed().await.is_err() {
                    return Some((Err(StoreError::Closed(shared.name.clone())), None));
                }
            }
        })
    }
}
