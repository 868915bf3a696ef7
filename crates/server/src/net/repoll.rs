//! A connection's task, polled again at once when it wakes itself while it runs.
//!
//! tokio's multi-threaded scheduler takes a task woken during its own poll for one that
//! yields: it goes to the back of its worker's queue, and an idle worker thread is woken to
//! steal it. hyper wakes its connection's task from inside the poll of every request with a
//! body (the body's channel unparks the connection once the handler has taken the chunk), so
//! every `POST /publish` woke the other core for nothing: a futex wake, a context switch and
//! a turn through the reactor on that core, per publish. [`Repoll`] catches such a wake and
//! polls the future once more in the same turn. A second wake in a row goes to the scheduler
//! as before, so a future that yields on purpose (hyper does after 16 pipelined requests,
//! tokio's budget does) still gives way.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Not being polled: a wake goes to the task's own waker.
const IDLE: u8 = 0;
/// Being polled: a wake is only noted.
const POLLING: u8 = 1;
/// Woken while being polled: to be polled again.
const WOKEN: u8 = 2;

/// A future whose wakes from inside its own poll become one more poll (see the module).
pub(super) struct Repoll<F> {
    future: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// `signal` as a waker, made once.
    waker: Waker,
}

/// Where the future's wakes land.
struct Signal {
    state: AtomicU8,
    /// The task's waker, as of its latest poll.
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let noted =
            self.state
                .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire);
        // IMPORTANT: only a wake that finds the future idle reaches the task. One that found
        // it being polled is seen by `poll` when that poll ends (the swap to IDLE), so
        // nothing is lost either way.
        if noted == Err(IDLE) {
            self.task.wake();
        }
    }
}

impl<F: Future> Repoll<F> {
    /// Wraps `future`.
    pub(super) fn new(future: F) -> Self {
        let signal = Arc::new(Signal {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Self {
            future: Box::pin(future),
            waker: Waker::from(signal.clone()),
            signal,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Registered before polling: a wake after the poll's end must find the task.
        this.signal.task.register(cx.waker());
        let mut own = Context::from_waker(&this.waker);
        for _ in 0..2 {
            this.signal.state.store(POLLING, Ordering::Release);
            let poll = this.future.as_mut().poll(&mut own);
            let woken = this.signal.state.swap(IDLE, Ordering::AcqRel) == WOKEN;
            if poll.is_ready() || !woken {
                return poll;
            }
        }
        // Woken during the second poll as well: give way, as the future asked.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wakes that reach it.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future that wakes itself during its first `self_wakes` polls, then is done.
    struct WakesItself {
        self_wakes: usize,
        polls: usize,
    }

    impl Future for WakesItself {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.self_wakes {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn poll_once<F: Future>(
        future: Pin<&mut Repoll<F>>,
        counter: &Arc<Counter>,
    ) -> Poll<F::Output> {
        let waker = Waker::from(counter.clone());
        future.poll(&mut Context::from_waker(&waker))
    }

    fn waking_itself(self_wakes: usize) -> Repoll<WakesItself> {
        Repoll::new(WakesItself {
            self_wakes,
            polls: 0,
        })
    }

    #[test]
    fn a_wake_during_the_poll_is_one_more_poll_not_a_wake_of_the_task() {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let mut future = std::pin::pin!(waking_itself(1));
        assert_eq!(poll_once(future.as_mut(), &counter), Poll::Ready(2));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_gives_way() {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let mut future = std::pin::pin!(waking_itself(5));
        assert!(poll_once(future.as_mut(), &counter).is_pending());
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            1,
            "the task was rescheduled"
        );
        assert_eq!(future.future.polls, 2);
    }

    #[test]
    fn a_wake_between_polls_reaches_the_task() {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let mut future = std::pin::pin!(Repoll::new(std::future::pending::<()>()));
        assert!(poll_once(future.as_mut(), &counter).is_pending());
        future.waker.wake_by_ref();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
    }
}
