//! Group commit: requests hand their encoded frames to one WAL thread,
//! which writes everything that has queued up while it was busy and then
//! fsyncs once for all of them.
//!
//! Every byte submitted gets a position in one ever-growing sequence (the
//! log sequence number, LSN): [`GroupCommit::submit`] returns the LSN just
//! past its frames, and [`GroupCommit::wait`] resolves once the log is
//! durable up to a given LSN. With [`FsyncMode::Always`] that means
//! fsynced; with [`FsyncMode::Interval`] it means written, and the thread
//! fsyncs on a timer, so a crash can lose up to one interval of
//! acknowledged writes. A submitter that finds its frames already taken by
//! another (see the head's per-shard buffers) waits for that LSN instead.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::{oneshot, watch};

use super::Position;
use super::{SpaceReserve, WalError, WalWriter};
use crate::reuse;

/// When appended frames are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncMode {
    /// Acknowledge only after fsync (group-committed).
    Always,
    /// Acknowledge after the write; fsync at most this long after it.
    Interval(Duration),
}

/// How far the log has got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// LSN up to which frames are written to the segment file.
    pub written: u64,
    /// LSN up to which frames are fsynced.
    pub synced: u64,
    /// Why the log is not advancing, while it is not: an fsync error, or
    /// a write error the segment could not be cut back from, for good; a
    /// write that was cut back (a full disk) until the same frames can be
    /// written after all. Waiters past the durable LSN fail meanwhile.
    pub failed: Option<Arc<str>>,
    /// Whether `failed` is for good (an fsync error, a segment that could
    /// not be cut back), not a full disk that may yet have room.
    pub failed_for_good: bool,
    /// Where in the segment files the log is durable by the fsync mode
    /// (the file position of the durable LSN): readers of the log
    /// ([`super::reader`]) read up to here and no further.
    pub durable_at: Position,
}

#[derive(Debug, Default)]
struct State {
    frames: Vec<u8>,
    /// LSN just past the last submitted byte.
    submitted: u64,
    rotate: Vec<oneshot::Sender<Result<u64, Stopped>>>,
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    progress: watch::Sender<Progress>,
    commits: std::sync::atomic::AtomicU64,
    syncs: std::sync::atomic::AtomicU64,
    sync_nanos: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
    write_failures: std::sync::atomic::AtomicU64,
    reserve: Arc<SpaceReserve>,
    /// LSN up to which the log is durable by the fsync mode: what
    /// [`GroupCommit::wait`] waits for, readable without the watch's lock.
    durable: std::sync::atomic::AtomicU64,
}

/// Counters of the WAL thread's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Writes, one per batch of queued frames.
    pub commits: u64,
    /// Fsyncs.
    pub syncs: u64,
    /// Time spent in fsync, in nanoseconds.
    pub sync_nanos: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Writes and fsyncs that failed (each try of a write the disk refuses
    /// counts).
    pub write_failures: u64,
    /// Whether the disk reserve is held: while it is not, the disk is
    /// full and new writes are refused.
    pub reserve_held: bool,
}

/// Why the log takes no new writes now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The disk is full (the reserve is given up, or a write is waiting
    /// for room): a retry once space returns succeeds.
    #[error("the WAL's disk is full: writes are refused until space returns")]
    DiskFull,
    /// A write or fsync failed for good; only a restart writes again.
    #[error("the WAL failed and takes no more writes until a restart: {0}")]
    Failed(Arc<str>),
}

/// Why the log cannot make something durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// The log was closed (the process is shutting down).
    #[error("the WAL is shut down")]
    ShutDown,
    /// A write or fsync failed; the log refuses what came after it.
    #[error("{0}")]
    Failed(Arc<str>),
    /// A write found the disk full and waits for room (what it carried is
    /// in no acknowledged answer).
    #[error("the disk is full: {0}")]
    DiskFull(Arc<str>),
}

/// The WAL thread and the queue in front of it.
#[derive(Debug)]
pub struct GroupCommit {
    shared: Arc<Shared>,
    mode: FsyncMode,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl GroupCommit {
    /// Starts the WAL thread over `writer`.
    pub fn start(writer: WalWriter, mode: FsyncMode) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            progress: watch::Sender::new(Progress {
                durable_at: writer.end(),
                ..Progress::default()
            }),
            commits: Default::default(),
            syncs: Default::default(),
            sync_nanos: Default::default(),
            bytes: Default::default(),
            write_failures: Default::default(),
            reserve: writer.reserve(),
            durable: Default::default(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("sluice-wal".into())
            .spawn(move || run(writer, mode, &s))?;
        Ok(Self {
            shared,
            mode,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Whether the log takes new writes now: not while the disk is full
    /// (its reserve given up, or a write waiting for room) or after it
    /// failed for good. While the reserve is not held, this tries to hold
    /// it again first, so the first write after space returns is taken.
    pub fn admit(&self) -> Result<(), Refusal> {
        {
            let p = self.shared.progress.borrow();
            if let Some(e) = &p.failed {
                return Err(if p.failed_for_good {
                    Refusal::Failed(Arc::clone(e))
                } else {
                    Refusal::DiskFull
                });
            }
        }
        if self.shared.reserve.try_hold() {
            Ok(())
        } else {
            Err(Refusal::DiskFull)
        }
    }

    /// Queues `frames` (whole records) for the next commit and returns the
    /// LSN to [`Self::wait`] for. Empty frames return the current end.
    pub fn submit(&self, frames: &[u8]) -> u64 {
        let mut st = self.shared.state.lock();
        if frames.is_empty() || st.closed {
            return st.submitted;
        }
        st.frames.extend_from_slice(frames);
        st.submitted += frames.len() as u64;
        let lsn = st.submitted;
        drop(st);
        self.shared.wake.notify_one();
        lsn
    }

    /// Resolves when the log is durable (by the fsync mode) up to `lsn`,
    /// or with the error that stopped it.
    pub fn wait(&self, lsn: u64) -> impl std::future::Future<Output = Result<(), Stopped>> + Send {
        let mut rx = self.shared.progress.subscribe();
        let always = self.mode == FsyncMode::Always;
        async move {
            let reached = rx
                .wait_for(|p| {
                    p.failed.is_some() || (if always { p.synced } else { p.written }) >= lsn
                })
                .await
                .map_err(|_| Stopped::ShutDown)?;
            match &reached.failed {
                Some(e)
                    if (if always {
                        reached.synced
                    } else {
                        reached.written
                    }) < lsn =>
                {
                    Err(if reached.failed_for_good {
                        Stopped::Failed(Arc::clone(e))
                    } else {
                        Stopped::DiskFull(Arc::clone(e))
                    })
                }
                _ => Ok(()),
            }
        }
    }

    /// Writes and fsyncs what is queued, then starts a new segment. Returns
    /// the index of the last segment before it: everything submitted
    /// before this call is in segments up to that index. Blocks.
    pub fn rotate(&self) -> Result<u64, Stopped> {
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.shared.state.lock();
            if st.closed {
                return Err(Stopped::ShutDown);
            }
            st.rotate.push(tx);
        }
        self.shared.wake.notify_one();
        rx.blocking_recv().map_err(|_| Stopped::ShutDown)?
    }

    /// The thread's counters.
    pub fn stats(&self) -> CommitStats {
        use std::sync::atomic::Ordering::Relaxed;
        CommitStats {
            commits: self.shared.commits.load(Relaxed),
            syncs: self.shared.syncs.load(Relaxed),
            sync_nanos: self.shared.sync_nanos.load(Relaxed),
            bytes: self.shared.bytes.load(Relaxed),
            write_failures: self.shared.write_failures.load(Relaxed),
            reserve_held: self.shared.reserve.is_held(),
        }
    }

    /// LSN up to which the log is durable by the fsync mode (written with
    /// [`FsyncMode::Interval`], fsynced with [`FsyncMode::Always`]): one
    /// atomic load, for the head's visibility checks.
    #[inline]
    pub fn durable_lsn(&self) -> u64 {
        self.shared
            .durable
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Where the log is now.
    pub fn progress(&self) -> Progress {
        self.shared.progress.borrow().clone()
    }

    /// Follows the log's progress: what readers of the log wait on.
    pub fn watch(&self) -> watch::Receiver<Progress> {
        self.shared.progress.subscribe()
    }

    /// Commits what is queued, fsyncs, and stops the thread; later
    /// submissions are not written. Blocks until done.
    pub fn close(&self) {
        self.shared.state.lock().closed = true;
        self.shared.wake.notify_one();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.close();
    }
}

fn run(mut writer: WalWriter, mode: FsyncMode, shared: &Shared) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut frames = Vec::new();
    let mut rotate = Vec::new();
    let mut last_sync = Instant::now();
    let mut dirty = false;
    // LSN just past the bytes in `frames` once taken.
    let mut lsn;
    let mut failed: Option<Arc<str>> = None;
    // Frames a cut-back write refused, retried ahead of newer ones: the
    // head already holds them, and the log must too, in order.
    let mut backlog: Vec<u8> = Vec::new();
    let mut retryable = false;
    loop {
        let closed;
        {
            let mut st = shared.state.lock();
            while st.frames.is_empty() && st.rotate.is_empty() && !st.closed {
                if retryable || !shared.reserve.is_held() {
                    shared.wake.wait_for(&mut st, WRITE_RETRY);
                    break;
                }
                match mode {
                    FsyncMode::Interval(every) if dirty => {
                        let left = every.saturating_sub(last_sync.elapsed());
                        if left.is_zero() || shared.wake.wait_for(&mut st, left).timed_out() {
                            break;
                        }
                    }
                    _ => shared.wake.wait(&mut st),
                }
            }
            std::mem::swap(&mut st.frames, &mut frames);
            std::mem::swap(&mut st.rotate, &mut rotate);
            lsn = st.submitted;
            closed = st.closed;
        }
        if !shared.reserve.is_held() && failed.is_none() && shared.reserve.try_hold() {
            tracing::info!("the WAL's disk reserve is held again: writes are accepted");
        }
        if !backlog.is_empty() {
            backlog.extend_from_slice(&frames);
            std::mem::swap(&mut backlog, &mut frames);
            backlog.clear();
        }
        if !frames.is_empty() && (failed.is_none() || retryable) {
            let mut attempt = writer.append(&frames);
            if let Err(e) = &attempt {
                shared.write_failures.fetch_add(1, Relaxed);
                // A full disk: give up the reserve and write into the room
                // it leaves, so that what the head already holds is logged
                // and acknowledged; the write path refuses new writes until
                // the reserve is held again.
                if matches!(e, WalError::WriteCutBack { .. }) && writer.release_reserve() {
                    tracing::warn!(
                        error = %e,
                        "WAL write failed: the disk is full; gave up the disk reserve to log \
                         the writes in flight, and refuse new writes until it can be held again"
                    );
                    attempt = writer.append(&frames);
                    if attempt.is_err() {
                        shared.write_failures.fetch_add(1, Relaxed);
                    }
                }
            }
            match attempt {
                Ok(()) => {
                    shared.commits.fetch_add(1, Relaxed);
                    shared.bytes.fetch_add(frames.len() as u64, Relaxed);
                    dirty = true;
                    if retryable {
                        tracing::info!("WAL writes succeed again; writes are accepted");
                        failed = None;
                        retryable = false;
                    }
                    // Visible before any waiter is woken: an acknowledged
                    // write is readable by the next query.
                    if matches!(mode, FsyncMode::Interval(_)) {
                        shared
                            .durable
                            .store(lsn, std::sync::atomic::Ordering::Release);
                    }
                    let interval = matches!(mode, FsyncMode::Interval(_));
                    shared.progress.send_modify(|p| {
                        p.written = lsn;
                        p.failed = None;
                        p.failed_for_good = false;
                        if interval {
                            p.durable_at = writer.end();
                        }
                    });
                }
                Err(e) => {
                    retryable = matches!(e, WalError::WriteCutBack { .. });
                    if retryable {
                        std::mem::swap(&mut backlog, &mut frames);
                    }
                    if failed.is_none() {
                        failed = Some(fail(shared, &e, retryable));
                    }
                }
            }
        }
        let sync_now = match mode {
            FsyncMode::Always => dirty,
            FsyncMode::Interval(every) => {
                dirty && (closed || !rotate.is_empty() || last_sync.elapsed() >= every)
            }
        };
        if sync_now && failed.is_none() {
            let started = Instant::now();
            match writer.sync() {
                Ok(()) => {
                    shared.syncs.fetch_add(1, Relaxed);
                    shared
                        .sync_nanos
                        .fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
                    last_sync = Instant::now();
                    dirty = false;
                    if mode == FsyncMode::Always {
                        shared
                            .durable
                            .store(lsn, std::sync::atomic::Ordering::Release);
                    }
                    shared.progress.send_modify(|p| {
                        p.synced = lsn;
                        p.durable_at = writer.end();
                    });
                }
                Err(e) => {
                    shared.write_failures.fetch_add(1, Relaxed);
                    // After a failed fsync the kernel may have dropped the
                    // dirty pages: nothing written since can be trusted.
                    retryable = false;
                    backlog.clear();
                    failed = Some(fail(shared, &e, false));
                }
            }
        }
        for tx in rotate.drain(..) {
            let r = match &failed {
                Some(e) => Err(Stopped::Failed(Arc::clone(e))),
                None => {
                    let before = writer.segment();
                    writer
                        .rotate()
                        .map(|()| before)
                        .map_err(|e| Stopped::Failed(Arc::from(e.to_string())))
                }
            };
            let _ = tx.send(r);
        }
        frames.clear();
        reuse::trim(&mut frames);
        // Frames the disk still refuses at close were never acknowledged:
        // the last attempt was this turn's.
        if closed && shared.state.lock().frames.is_empty() {
            return;
        }
    }
}

/// How often a write the disk refused is tried again.
const WRITE_RETRY: Duration = Duration::from_secs(1);

fn fail(shared: &Shared, e: &WalError, retryable: bool) -> Arc<str> {
    if retryable {
        tracing::error!(error = %e, "WAL write failed; writes are refused until it succeeds (retried every second)");
    } else {
        tracing::error!(error = %e, "WAL write failed; writes are refused from now on");
    }
    let msg: Arc<str> = Arc::from(e.to_string());
    shared.progress.send_modify(|p| {
        p.failed = Some(Arc::clone(&msg));
        p.failed_for_good = !retryable;
    });
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record::{encode_samples, Record};
    use crate::wal::{replay, WalOptions};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn submit_from_threads(dir: &std::path::Path, mode: FsyncMode) -> CommitStats {
        let writer = WalWriter::open(dir, WalOptions::default()).expect("open");
        let gc = Arc::new(GroupCommit::start(writer, mode).expect("start"));
        let threads: Vec<_> = (0..8u64)
            .map(|th| {
                let gc = Arc::clone(&gc);
                std::thread::spawn(move || {
                    for i in 0..100u64 {
                        let mut buf = Vec::new();
                        encode_samples(&mut buf, &[(th, i as i64, i as f64)]);
                        let lsn = gc.submit(&buf);
                        block_on(gc.wait(lsn)).expect("durable");
                        let p = gc.progress();
                        if mode == FsyncMode::Always {
                            assert!(p.synced >= lsn);
                        } else {
                            assert!(p.written >= lsn);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let stats = gc.stats();
        drop(gc);
        stats
    }

    fn replayed(dir: &std::path::Path) -> Vec<(u64, i64)> {
        let mut got = Vec::new();
        replay(dir, &WalOptions::default(), |r| {
            if let Record::Samples(s) = r {
                got.extend(s.map(|(r, t, _)| (r, t)));
            }
        })
        .expect("replay");
        got
    }

    #[test]
    fn every_acknowledged_submission_is_in_the_log_in_submit_order_per_thread() {
        for mode in [
            FsyncMode::Always,
            FsyncMode::Interval(Duration::from_millis(5)),
        ] {
            let dir = tempfile::tempdir().expect("tmp");
            let stats = submit_from_threads(dir.path(), mode);
            let got = replayed(dir.path());
            assert_eq!(got.len(), 800, "{mode:?}");
            for th in 0..8 {
                let mine: Vec<i64> = got
                    .iter()
                    .filter(|(r, _)| *r == th)
                    .map(|&(_, t)| t)
                    .collect();
                assert_eq!(mine, (0..100).collect::<Vec<_>>(), "{mode:?}");
            }
            // One write per commit, never more fsyncs than commits. In
            // interval mode all 800 can be written before the first tick,
            // so only `Always` must have synced by now.
            assert!((1..=800).contains(&stats.commits), "{stats:?}");
            assert!(stats.syncs <= stats.commits, "{stats:?}");
            if mode == FsyncMode::Always {
                assert!(stats.syncs >= 1, "{stats:?}");
            }
        }
    }

    #[test]
    fn rotate_puts_everything_submitted_before_it_in_earlier_segments() {
        let dir = tempfile::tempdir().expect("tmp");
        let writer = WalWriter::open(dir.path(), WalOptions::default()).expect("open");
        let gc = GroupCommit::start(writer, FsyncMode::Interval(Duration::from_secs(60)))
            .expect("start");
        let mut buf = Vec::new();
        encode_samples(&mut buf, &[(1, 1, 1.0)]);
        gc.submit(&buf);
        let last = gc.rotate().expect("rotate");
        assert_eq!(last, 1);
        // Rotation fsyncs even in interval mode.
        assert_eq!(gc.progress().synced, buf.len() as u64);
        let lsn = gc.submit(&buf);
        block_on(gc.wait(lsn)).expect("written");
        drop(gc);
        assert_eq!(crate::wal::segments(dir.path()).expect("list"), vec![1, 2]);
        assert_eq!(replayed(dir.path()), vec![(1, 1), (1, 1)]);
    }

    #[test]
    fn submissions_after_close_do_not_advance() {
        let dir = tempfile::tempdir().expect("tmp");
        let writer = WalWriter::open(dir.path(), WalOptions::default()).expect("open");
        let gc = GroupCommit::start(writer, FsyncMode::Always).expect("start");
        assert_eq!(gc.submit(b""), 0);
        block_on(gc.wait(0)).expect("nothing to wait for");
        gc.shared.state.lock().closed = true;
        assert_eq!(gc.submit(b"x"), 0);
    }
}
