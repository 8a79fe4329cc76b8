//! Group commit: requests hand their encoded frames to one WAL thread,
//! which writes everything that has queued up while it was busy and then
//! fsyncs once for all of them. With [`FsyncMode::Always`] a request's
//! acknowledgement waits for that fsync; with [`FsyncMode::Interval`] it
//! is sent once the frames are written, and the thread fsyncs on a timer,
//! so a crash can lose up to one interval of acknowledged writes.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use super::WalWriter;

/// When appended frames are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncMode {
    /// Acknowledge only after fsync (group-committed).
    Always,
    /// Acknowledge after the write; fsync at most this long after it.
    Interval(Duration),
}

/// The outcome a submitter waits for: `Err` carries the I/O error text.
pub type Ack = oneshot::Receiver<Result<(), String>>;

#[derive(Debug, Default)]
struct State {
    frames: Vec<u8>,
    waiters: Vec<oneshot::Sender<Result<(), String>>>,
    closed: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    commits: std::sync::atomic::AtomicU64,
    syncs: std::sync::atomic::AtomicU64,
}

/// The WAL thread and the queue in front of it.
#[derive(Debug)]
pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl GroupCommit {
    /// Starts the WAL thread over `writer`.
    pub fn start(writer: WalWriter, mode: FsyncMode) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("sluice-wal".into())
            .spawn(move || run(writer, mode, &s))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `frames` (whole records) for the next commit; the returned
    /// receiver resolves when they are durable (or written, by mode).
    pub fn submit(&self, frames: &[u8]) -> Ack {
        let (tx, rx) = oneshot::channel();
        let mut st = self.shared.state.lock();
        if st.closed {
            let _ = tx.send(Err("the WAL is shut down".into()));
            return rx;
        }
        st.frames.extend_from_slice(frames);
        st.waiters.push(tx);
        drop(st);
        self.shared.wake.notify_one();
        rx
    }

    /// Commits done (one write of all queued frames each) and fsyncs done.
    pub fn stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.shared.commits.load(Relaxed),
            self.shared.syncs.load(Relaxed),
        )
    }

    /// Commits what is queued, fsyncs, and stops the thread.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(mut writer: WalWriter, mode: FsyncMode, shared: &Shared) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut frames = Vec::new();
    let mut waiters = Vec::new();
    let mut last_sync = Instant::now();
    let mut dirty = false;
    loop {
        let closed;
        {
            let mut st = shared.state.lock();
            while st.frames.is_empty() && st.waiters.is_empty() && !st.closed {
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
            std::mem::swap(&mut st.waiters, &mut waiters);
            closed = st.closed;
        }
        let mut result = Ok(());
        if !frames.is_empty() {
            result = writer.append(&frames).map_err(|e| e.to_string());
            shared.commits.fetch_add(1, Relaxed);
            dirty = true;
        }
        let sync_now = match mode {
            FsyncMode::Always => dirty,
            FsyncMode::Interval(every) => dirty && (closed || last_sync.elapsed() >= every),
        };
        let ack_before_sync = matches!(mode, FsyncMode::Interval(_));
        if ack_before_sync {
            for w in waiters.drain(..) {
                let _ = w.send(result.clone());
            }
        }
        if sync_now && result.is_ok() {
            result = writer.sync().map_err(|e| e.to_string());
            shared.syncs.fetch_add(1, Relaxed);
            last_sync = Instant::now();
            dirty = false;
        }
        if let Err(e) = &result {
            tracing::error!(error = %e, "WAL write failed");
        }
        for w in waiters.drain(..) {
            let _ = w.send(result.clone());
        }
        frames.clear();
        if frames.capacity() > 16 << 20 {
            frames = Vec::new();
        }
        if closed && shared.state.lock().frames.is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record::{encode_samples, Record};
    use crate::wal::{replay, WalOptions};

    fn submit_from_threads(dir: &std::path::Path, mode: FsyncMode) -> (u64, u64) {
        let writer = WalWriter::open(dir, WalOptions::default()).expect("open");
        let gc = Arc::new(GroupCommit::start(writer, mode).expect("start"));
        let threads: Vec<_> = (0..8u64)
            .map(|th| {
                let gc = Arc::clone(&gc);
                std::thread::spawn(move || {
                    for i in 0..100u64 {
                        let mut buf = Vec::new();
                        encode_samples(&mut buf, &[(th, i as i64, i as f64)]);
                        gc.submit(&buf)
                            .blocking_recv()
                            .expect("answered")
                            .expect("durable");
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
            let (commits, syncs) = submit_from_threads(dir.path(), mode);
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
            // One write per commit, never more fsyncs than commits.
            assert!((1..=800).contains(&commits), "{commits}");
            assert!(
                syncs >= 1 && syncs <= commits,
                "{syncs} syncs, {commits} commits"
            );
        }
    }

    #[test]
    fn submissions_after_close_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let writer = WalWriter::open(dir.path(), WalOptions::default()).expect("open");
        let gc = GroupCommit::start(writer, FsyncMode::Always).expect("start");
        let ack = gc.submit(b"");
        assert_eq!(ack.blocking_recv().expect("answered"), Ok(()));
        gc.shared.state.lock().closed = true;
        let refused = gc.submit(b"x").blocking_recv().expect("answered");
        assert!(refused.is_err());
    }
}
