//! What the subscription tests share: everything a subscriber is given now.

use futures::{FutureExt, StreamExt};
use sluice_store::{Delivery, FilterSet, StreamHandle};

/// Everything a subscriber of `filter` from `start` is given now (the subscription is polled
/// until it waits for new messages).
pub fn drain(s: &StreamHandle, start: u64, filter: &str) -> Vec<Delivery> {
    let mut sub = Box::pin(s.subscribe(start, FilterSet::new([filter]).unwrap()));
    let mut out = Vec::new();
    while let Some(next) = sub.next().now_or_never() {
        out.push(
            next.expect("the subscription ended")
                .expect("a read failed"),
        );
    }
    out
}
