//! The writer of a stream: the only code that mutates it. Requests queue on a channel; whoever
//! holds the writer's turn ([`Writer`]) takes everything queued, applies it, writes the batch
//! with one write call, syncs once per policy (group commit), then makes the batch visible and
//! answers every request. A batch whose write or sync fails is answered with the error and
//! undone ([`rollback`]); the stream stays open and the next batch is tried again.
//!
//! The turn is the writer thread's, except that with `sync` other than `always` a publisher
//! that finds it free applies the queue and its own request on its own thread: the write only
//! reaches the OS, and a hand-off to the writer thread and back would cost two thread
//! wake-ups per publish. The thread still does what may block for long: fsyncs, snapshot
//! writes, retries, stopping. No tokio runtime is needed: answers go through
//! `tokio::sync::oneshot`, which works anywhere.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::config::{StreamConfig, SyncPolicy};
use crate::error::{Result, StoreError};
use crate::limits;
use crate::markers;
use crate::persist;
use crate::purge;
use crate::rollback::{self, BatchStart};
use crate::rules::{self, Publish};
use crate::state::{Removal, State};
use crate::time::now_ns;
use crate::types::{PubAck, PurgeRequest};

/// Largest number of requests applied in one batch.
const MAX_BATCH: usize = 4096;
/// Longest wait for returning publishers before a sync-always batch is written.
const MAX_LINGER: Duration = Duration::from_millis(2);
/// Longest sleep between housekeeping passes.
const MAX_IDLE: Duration = Duration::from_millis(500);
/// While writes fail: the shortest time between tries no request asked for (an expiry due, the
/// index.db write that finds out whether the disk takes writes again).
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// A request to the writer.
pub enum Op {
    /// Store a message.
    Publish(Publish, oneshot::Sender<Result<PubAck>>),
    /// Store several messages in order, answered together.
    PublishBatch(Vec<Publish>, oneshot::Sender<Vec<Result<PubAck>>>),
    /// Delete one message.
    Delete(u64, oneshot::Sender<Result<bool>>),
    /// Purge.
    Purge(PurgeRequest, oneshot::Sender<Result<u64>>),
    /// Replace the configuration.
    Update(Box<StreamConfig>, oneshot::Sender<Result<()>>),
    /// Write index.db and the sidecars now.
    Flush(oneshot::Sender<Result<()>>),
}

/// State shared by the stream's handles and its writer.
pub struct Shared {
    /// The stream's name.
    pub name: String,
    /// Its state.
    pub state: Mutex<State>,
    /// Last visible sequence; bumped (and re-sent on close) to wake subscribers.
    pub visible: watch::Sender<u64>,
    /// The store-wide sync policy.
    pub sync: SyncPolicy,
    /// What each source of the stream is doing, by index name.
    pub sourcing: Mutex<std::collections::BTreeMap<String, crate::types::SourceStatus>>,
    /// The queue and the right to apply it.
    pub writer: Mutex<Writer>,
    /// The writer thread, to wake when a request is queued.
    pub thread: OnceLock<Thread>,
    /// Set with each wake-up of the writer thread that asks for a pass (a request queued, a
    /// stop); taken by the thread when it wakes.
    pub wanted: AtomicBool,
    /// Requests queued so far with `sync = always` (the only policy whose batches wait for
    /// more): the writer compares the count before and after an fsync to learn whether
    /// publishes keep coming while it waits on the disk.
    pub queued: AtomicU64,
}

impl Shared {
    /// Locks the state (a poisoned lock only means a reader panicked; the data is intact).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Reply {
    Ack(oneshot::Sender<Result<PubAck>>, Result<PubAck>),
    Batch(oneshot::Sender<Vec<Result<PubAck>>>, Vec<Result<PubAck>>),
    Delete(oneshot::Sender<Result<bool>>, Result<bool>),
    Purge(oneshot::Sender<Result<u64>>, Result<u64>),
    Unit(oneshot::Sender<Result<()>>, Result<()>),
}

impl Reply {
    /// This answer of a batch whose write failed with `e`: every success becomes `e`.
    fn fail(self, e: &StoreError) -> Self {
        let err = || e.copy_as_write_failure();
        match self {
            Reply::Ack(tx, Ok(_)) => Reply::Ack(tx, Err(err())),
            Reply::Batch(tx, acks) => {
                Reply::Batch(tx, acks.into_iter().map(|a| a.and(Err(err()))).collect())
            }
            Reply::Delete(tx, Ok(_)) => Reply::Delete(tx, Err(err())),
            Reply::Purge(tx, Ok(_)) => Reply::Purge(tx, Err(err())),
            Reply::Unit(tx, Ok(_)) => Reply::Unit(tx, Err(err())),
            other => other,
        }
    }

    fn send(self) {
        // A requester that went away no longer wants the answer.
        let _ = match self {
            Reply::Ack(tx, r) => tx.send(r).map_err(drop),
            Reply::Batch(tx, r) => tx.send(r).map_err(drop),
            Reply::Delete(tx, r) => tx.send(r).map_err(drop),
            Reply::Purge(tx, r) => tx.send(r).map_err(drop),
            Reply::Unit(tx, r) => tx.send(r).map_err(drop),
        };
    }
}

/// Who applies a batch, which decides what it may wait for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The writer thread: syncs per policy, writes due snapshots, lingers for group commit.
    Thread,
    /// A publisher's own thread, which must not block for long: it never fsyncs for the
    /// policy and leaves due snapshots to the writer thread (a `Flush` asked for is done).
    Caller,
}

/// The stream's queue and what the writer keeps between batches. Whoever holds it applies
/// the next batch: the writer thread, or a publisher that found it free (see
/// [`Shared::try_turn`]). Requests are only taken off the queue while it is held, so the
/// order requests were queued in is the order they are applied in.
pub struct Writer {
    /// The queue; `None` once the writer stopped (requests queued later are dropped, which
    /// their senders see as a closed stream).
    queue: Option<Receiver<Op>>,
    /// Set by [`Shared::request_stop`]: stop after the queue is drained, persisting or not.
    stop: Option<bool>,
    /// Every handle is gone: nothing can be queued any more, so the writer stops.
    orphaned: bool,
    flush_every: Duration,
    last_sync: Instant,
    last_flush: Instant,
    // Group commit (see `linger`): what the last batch held, how long its fsync took, and
    // how many requests were queued meanwhile.
    last_batch: usize,
    last_fsync: Duration,
    queued_during_fsync: u64,
}

impl Writer {
    /// The writer of a stream over `queue`, writing snapshots every `flush_every`.
    pub fn new(queue: Receiver<Op>, flush_every: Duration) -> Self {
        Self {
            queue: Some(queue),
            stop: None,
            orphaned: false,
            flush_every,
            last_sync: Instant::now(),
            last_flush: Instant::now(),
            last_batch: 0,
            last_fsync: Duration::ZERO,
            queued_during_fsync: 0,
        }
    }
}

impl Shared {
    /// Waits for the writer's turn.
    fn turn(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer's turn, for a publisher that may apply its own request: only when no
    /// publish waits for an fsync (with `sync = always` the writer thread batches them), and
    /// only when nobody else is applying a batch right now.
    pub fn try_turn(&self) -> Option<MutexGuard<'_, Writer>> {
        if self.sync == SyncPolicy::Always {
            return None;
        }
        match self.writer.try_lock() {
            Ok(turn) => Some(turn),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Counts a request queued for the writer thread (with `sync = always`, see
    /// [`Shared::queued`]) and wakes it.
    pub fn queued_one(&self) {
        if self.sync == SyncPolicy::Always {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
        self.wake_writer();
    }

    /// Wakes the writer thread (a request was queued, or a stop asked for).
    pub fn wake_writer(&self) {
        self.wanted.store(true, Ordering::Release);
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Asks the writer thread to stop once it has applied what is queued.
    pub fn request_stop(&self, persist: bool) {
        self.turn().stop.get_or_insert(persist);
        self.wake_writer();
    }
}

/// Applies, in the caller's turn, everything queued and then `op`. The caller's thread does
/// the write (to the OS, no fsync): no hand-off to the writer thread and back.
pub fn apply_now(shared: &Shared, turn: &mut Writer, op: Op) {
    // All of it: `op` comes after everything queued before it.
    let mut ops = drain(turn, usize::MAX);
    ops.push(op);
    batch(shared, turn, ops, Place::Caller, None);
}

/// Runs the writer thread until a stop is asked for or every handle is gone.
pub fn run(shared: Arc<Shared>) {
    loop {
        wait_for_work(&shared);
        let mut turn = shared.turn();
        let ops = take_batch(&shared, &mut turn);
        let stop = turn.stop.or(turn.orphaned.then_some(true));
        if stop.is_some() {
            // Everything queued before the stop is answered; later requests find the
            // stream closed.
            let mut ops = ops;
            ops.extend(drain(&mut turn, usize::MAX));
            batch(&shared, &mut turn, ops, Place::Thread, stop);
            turn.queue = None;
            return;
        }
        batch(&shared, &mut turn, ops, Place::Thread, None);
    }
}

/// Sleeps until a request is queued (or a stop asked for), or until the next housekeeping is
/// due as it stands now. A wake-up nobody asked for (a stale unpark, or a spurious one) does
/// not end the sleep early: the writer runs a pass when there is work or a pass is due, as a
/// thread blocked on its queue did.
fn wait_for_work(shared: &Shared) {
    let deadline = Instant::now() + next_wake(shared);
    while !shared.wanted.swap(false, Ordering::AcqRel) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::park_timeout(left);
    }
}

/// Up to `max` queued requests, without waiting; notes when every handle is gone.
fn drain(turn: &mut Writer, max: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    let Some(queue) = &turn.queue else {
        return ops;
    };
    while ops.len() < max {
        match queue.try_recv() {
            Ok(op) => ops.push(op),
            Err(TryRecvError::Empty) => break,
            Err(TryRecvError::Disconnected) => {
                turn.orphaned = true;
                break;
            }
        }
    }
    ops
}

/// The writer thread's next batch: what is queued, and with `sync = always`, what [`linger`]
/// says is worth waiting for.
fn take_batch(shared: &Shared, turn: &mut Writer) -> Vec<Op> {
    let mut ops = drain(turn, MAX_BATCH);
    if shared.sync != SyncPolicy::Always || ops.is_empty() {
        return ops;
    }
    let linger = linger(turn.last_fsync, turn.last_batch, turn.queued_during_fsync);
    let Some(queue) = &turn.queue else {
        return ops;
    };
    let until = Instant::now() + linger.most;
    let mut last_arrival = Instant::now();
    while ops.len() < linger.enough {
        let wait_until = until.min(last_arrival + linger.gap);
        match queue.recv_timeout(wait_until.saturating_duration_since(Instant::now())) {
            Ok(op) => {
                ops.push(op);
                last_arrival = Instant::now();
            }
            Err(_) => break,
        }
    }
    ops
}

/// How a sync-always batch waits for more requests before it is written.
#[derive(Debug, PartialEq)]
struct Linger {
    /// The longest wait.
    most: Duration,
    /// The number of requests that ends it.
    enough: usize,
    /// The wait ends when no request came for this long.
    gap: Duration,
}

/// How the next sync-always batch waits, from what the last one saw: its fsync took
/// `last_fsync`, it held `last_batch` requests, and `queued_during_fsync` were queued while
/// the fsync ran.
///
/// - Requests queued during the fsync did not wait for its answers: they come whatever the
///   hub answers (many clients publishing on their own). Waiting up to one more fsync's time
///   (at most [`MAX_LINGER`]) then about doubles what each fsync covers; the wait ends early
///   when no request came for three times the gap between those seen during the fsync.
/// - Otherwise the requests to come are those of the publishers just answered, which come
///   straight back if they come at all: wait a quarter of an fsync for as many as the last
///   batch held. A lone publisher that waits for each answer never waits here (its batch of
///   one is already enough).
fn linger(last_fsync: Duration, last_batch: usize, queued_during_fsync: u64) -> Linger {
    if queued_during_fsync > 0 {
        let most = last_fsync.min(MAX_LINGER);
        let gap = last_fsync * 3 / u32::try_from(queued_during_fsync).unwrap_or(u32::MAX);
        Linger {
            most,
            enough: MAX_BATCH,
            gap: gap.min(most),
        }
    } else {
        let most = (last_fsync / 4).min(MAX_LINGER);
        Linger {
            most,
            enough: last_batch.clamp(1, MAX_BATCH),
            gap: most,
        }
    }
}

/// Applies `ops` in order, writes them with one write call, syncs per policy (on the
/// writer thread), then makes them visible and answers every request. `stop` ends the
/// stream after the batch, persisting its snapshots when true.
fn batch(shared: &Shared, turn: &mut Writer, ops: Vec<Op>, place: Place, stop: Option<bool>) {
    if place == Place::Thread {
        turn.last_batch = ops.len();
    }
    let mut st = shared.lock();
    let start = BatchStart::of(&st);
    let (mut replies, flush_now) = apply(shared, &mut st, ops);
    if !st.closed && st.fenced.is_none() {
        housekeeping(&mut st);
    }
    let writes = st.has_unwritten();
    let write_result = st.flush();
    st.stats.batches += u64::from(!replies.is_empty());
    let sync_due = place == Place::Thread
        && match shared.sync {
            SyncPolicy::Always => true,
            SyncPolicy::Interval(every) => turn.last_sync.elapsed() >= every,
            SyncPolicy::Never => false,
        };
    let unsynced: Vec<(PathBuf, Arc<File>)> = if sync_due || stop.is_some() {
        st.blocks.take_unsynced()
    } else {
        Vec::new()
    };
    let mut result = write_result;
    // IMPORTANT: the lock is let go only for an fsync. Without one the batch is made visible
    // under the lock that applied it, so no reader meets counts that include messages it
    // cannot read yet.
    if result.is_ok() && !unsynced.is_empty() {
        drop(st);
        let started = Instant::now();
        let queued_before = shared.queued.load(Ordering::Relaxed);
        let mut fsyncs = 0;
        for (path, f) in unsynced {
            if let Err(e) = crate::fsutil::sync_data(&f) {
                result = Err(StoreError::SyncFailed { path, source: e });
                break;
            }
            fsyncs += 1;
        }
        turn.last_sync = Instant::now();
        turn.last_fsync = started.elapsed();
        turn.queued_during_fsync = shared.queued.load(Ordering::Relaxed) - queued_before;
        st = shared.lock();
        st.stats.fsyncs += fsyncs;
    }
    match &result {
        Ok(()) => commit(&mut st, writes),
        Err(e) => {
            replies = replies.into_iter().map(|r| r.fail(e)).collect();
            abandon(&mut st, start, e, stop.is_none());
            if matches!(e, StoreError::SyncFailed { .. }) {
                fence(&mut st, e);
            }
        }
    }
    let retry_due =
        st.health.blocks.failing().is_some() && turn.last_flush.elapsed() >= RETRY_INTERVAL;
    let snapshot_due = flush_now
        || (place == Place::Thread
            && ((st.dirty && turn.last_flush.elapsed() >= turn.flush_every) || retry_due))
        || (stop == Some(true) && st.dirty);
    // A failed batch left the state as it was only once rebuilt: not when stopping. A fenced
    // stream writes no snapshot: the next start rebuilds from what the blocks hold.
    if snapshot_due && !st.closed && st.fenced.is_none() && (result.is_ok() || stop.is_none()) {
        write_snapshots(&mut st);
        turn.last_flush = Instant::now();
    }
    if stop.is_some() {
        st.closed = true;
    }
    let visible = st.visible;
    drop(st);
    shared.visible.send_replace(visible);
    replies.into_iter().for_each(Reply::send);
}

/// Applies `ops` to the stream's state in order (failing each at once when the stream is
/// closed or fenced); the replies to send once the batch is written, and whether a snapshot was
/// asked for.
fn apply(shared: &Shared, st: &mut State, ops: Vec<Op>) -> (Vec<Reply>, bool) {
    let mut replies = Vec::with_capacity(ops.len());
    let mut flush_now = false;
    for op in ops {
        if st.closed {
            fail_op(op, || StoreError::Closed(shared.name.clone()));
            continue;
        }
        if let Some(cause) = &st.fenced {
            let stream = shared.name.clone();
            let cause = cause.clone();
            fail_op(op, move || StoreError::Fenced {
                stream: stream.clone(),
                cause: cause.clone(),
            });
            continue;
        }
        match op {
            Op::Publish(p, tx) => replies.push(Reply::Ack(tx, rules::publish(st, &p))),
            Op::PublishBatch(batch, tx) => {
                let acks = batch.iter().map(|p| rules::publish(st, p)).collect();
                replies.push(Reply::Batch(tx, acks));
            }
            Op::Delete(seq, tx) => replies.push(Reply::Delete(tx, purge::delete_msg(st, seq))),
            Op::Purge(req, tx) => replies.push(Reply::Purge(tx, purge::purge(st, &req))),
            Op::Update(cfg, tx) => replies.push(Reply::Unit(tx, update(st, *cfg))),
            Op::Flush(tx) => {
                flush_now = true;
                replies.push(Reply::Unit(tx, Ok(())));
            }
        }
    }
    (replies, flush_now)
}

/// Makes a written batch visible, then removes the blocks it emptied (only now: a block is
/// never deleted for a batch that might yet fail).
fn commit(st: &mut State, wrote: bool) {
    st.visible = st.table.last_seq;
    if wrote {
        st.health.blocks.succeeded(&st.config.name);
    }
    if let Err(e) = persist::drop_empty_blocks(st) {
        st.health.snapshots.failed(&st.config.name, &e);
    }
    st.keep_index_within_budget();
}

/// Undoes a batch whose write failed with `e` ([`rollback`]), rebuilding the state unless the
/// stream is stopping. Only when the files cannot be put back is the stream closed.
fn abandon(st: &mut State, start: BatchStart, e: &StoreError, rebuild: bool) {
    st.health.blocks.failed(&st.config.name, e);
    if let Err(undo) = rollback::undo(st, start, rebuild) {
        tracing::error!(stream = %st.config.name, error = %undo, write_error = %e, "undoing a failed write failed; stream closed until reopen");
        st.closed = true;
    }
}

/// Writes index.db and the sidecars; a failure is logged (once per run of them) and retried at
/// the next flush. A success while block writes fail shows the disk takes writes again.
fn write_snapshots(st: &mut State) {
    match persist::write_snapshots(st) {
        Ok(()) => {
            st.health.snapshots.succeeded(&st.config.name);
            st.health.blocks.succeeded(&st.config.name);
        }
        Err(e) => st.health.snapshots.failed(&st.config.name, &e),
    }
}

/// Stops the stream's writes for good after the failed fsync `e`: the kernel may have
/// dropped pages it could not write and will not say so again, so neither a retry nor a later
/// fsync could tell what the disk holds. Reads go on; a restart recovers from the disk.
fn fence(st: &mut State, e: &StoreError) {
    tracing::error!(stream = %st.config.name, error = %e, "an fsync failed: the stream accepts no writes until sluice restarts");
    st.fenced = Some(e.to_string());
    st.health.fence(e.to_string());
}

/// Answers `op` with `error()` without applying it.
fn fail_op(op: Op, error: impl Fn() -> StoreError) {
    match op {
        Op::Publish(_, tx) => Reply::Ack(tx, Err(error())).send(),
        Op::PublishBatch(batch, tx) => {
            Reply::Batch(tx, batch.iter().map(|_| Err(error())).collect()).send()
        }
        Op::Delete(_, tx) => Reply::Delete(tx, Err(error())).send(),
        Op::Purge(_, tx) => Reply::Purge(tx, Err(error())).send(),
        Op::Update(_, tx) | Op::Flush(tx) => Reply::Unit(tx, Err(error())).send(),
    }
}

/// Age and TTL expiry, with subject delete markers.
fn housekeeping(st: &mut State) {
    let now = now_ns();
    match limits::next_due(st) {
        Ok(Some(due)) if due <= now => {}
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(stream = %st.config.name, error = %e, "expiry failed");
            return;
        }
    }
    let result = limits::expire(st, now).and_then(|aged| {
        let orphaned = markers::orphaned(st, &aged);
        markers::leave(st, &orphaned, markers::Reason::MaxAge)?;
        fire_schedules(st, now)
    });
    if let Err(e) = result {
        tracing::warn!(stream = %st.config.name, error = %e, "expiry failed");
    }
}

/// Fires every due schedule once (runs missed while down collapse into one), then re-arms
/// repeating ones after the fire and removes fired one-shots. Each fire is stored with the
/// time its next fire is counted from, so fires are stored at least a period apart. First
/// removes the messages of schedules recovery found spent.
fn fire_schedules(st: &mut State, now: i64) -> Result<()> {
    let spent = st.schedules.take_spent();
    if !spent.is_empty() {
        st.remove(&spent, Removal::Intended)?;
    }
    for (subject, entry) in st.schedules.due(now) {
        let Some(msg) = st.read_any(entry.seq)? else {
            continue;
        };
        // Not before the fire was due, even if the clock stepped back since `now`.
        let at = st.next_ts().max(entry.next);
        let Some((target, headers, next)) = crate::schedule::fire(&subject, &msg.headers, at)
        else {
            continue;
        };
        let fired = Publish {
            subject: target,
            headers,
            payload: msg.payload.clone(),
            internal: true,
        };
        if let Err(e) = rules::publish_at(st, &fired, at) {
            tracing::warn!(stream = %st.config.name, schedule = %subject, error = %e, "scheduled message rejected");
        }
        match next {
            Some(next) => st.schedules.insert(&subject, entry.seq, next),
            None => {
                st.remove(&[entry.seq], Removal::Intended)?;
            }
        }
    }
    Ok(())
}

fn next_wake(shared: &Shared) -> Duration {
    let mut st = shared.lock();
    let mut wake = MAX_IDLE;
    // A block that cannot be read is reported by the expiry pass; wake as if nothing were due.
    if let Ok(Some(due)) = limits::next_due(&mut st) {
        let ns = due.saturating_sub(now_ns()).max(0) as u64;
        wake = wake.min(Duration::from_nanos(ns));
    }
    if let SyncPolicy::Interval(every) = shared.sync {
        wake = wake.min(every);
    }
    if st.health.blocks.failing().is_some() {
        // An expiry due now would otherwise be tried (and undone) without pause.
        wake = wake.max(RETRY_INTERVAL);
    }
    wake
}

fn update(st: &mut State, cfg: StreamConfig) -> Result<()> {
    cfg.validate()?;
    if cfg.name != st.config.name || cfg.storage != st.config.storage {
        return Err(StoreError::InvalidConfig(
            "name and storage cannot change".into(),
        ));
    }
    if st.config.sealed && !cfg.sealed {
        return Err(StoreError::InvalidConfig(
            "a sealed stream cannot be unsealed".into(),
        ));
    }
    if let Some(dir) = &st.dir {
        crate::meta::write(dir, &cfg, st.created, st.incarnation)?;
    }
    st.config = cfg;
    limits::enforce(st, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FSYNC: Duration = Duration::from_micros(800);

    #[test]
    fn a_lone_publisher_that_waits_for_each_answer_is_never_kept_waiting() {
        // Nothing came while the last fsync ran and the last batch held one request: the one
        // already taken is enough.
        let linger = linger(FSYNC, 1, 0);
        assert_eq!(linger.enough, 1);
        assert_eq!(linger.most, FSYNC / 4);
    }

    #[test]
    fn publishers_just_answered_are_waited_for_a_quarter_of_an_fsync() {
        let linger = linger(FSYNC, 64, 0);
        assert_eq!(linger.enough, 64);
        assert_eq!(linger.most, FSYNC / 4);
        assert_eq!(linger.gap, FSYNC / 4);
    }

    #[test]
    fn requests_arriving_during_the_fsync_make_the_next_batch_wait_up_to_one_more_fsync() {
        // Four came in 800 µs: one every 200 µs; the wait ends after 600 µs without one.
        let linger = linger(FSYNC, 4, 4);
        assert_eq!(linger.most, FSYNC);
        assert_eq!(linger.enough, MAX_BATCH);
        assert_eq!(linger.gap, Duration::from_micros(600));
        // Never longer than MAX_LINGER, however slow the disk.
        let slow = super::linger(Duration::from_millis(30), 4, 1);
        assert_eq!(slow.most, MAX_LINGER);
        assert_eq!(slow.gap, MAX_LINGER);
    }
}
