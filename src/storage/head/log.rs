//! The head's side of the WAL: each shard gathers its records under its
//! own lock; a commit hands the touched shards' records over (the free
//! ones in one submission, each held one after it alone), and a shard's
//! log catches up with what the WAL made durable (which decides what
//! readers see).

use std::sync::Arc;

use super::shard::{Shard, ShardLog};
use super::{AppendCounts, Head, Padded, ShardCell};
use crate::reuse::{self, Reused};
use crate::wal::commit::GroupCommit;

impl Head {
    /// Bytes of WAL segments on disk, when the head writes a WAL.
    pub fn wal_disk_bytes(&self) -> Option<u64> {
        let dir = self.wal_dir.as_ref()?;
        let entries = std::fs::read_dir(dir).ok()?;
        Some(
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len())
                .sum(),
        )
    }

    /// From now on, every series created and sample stored is also
    /// written to `wal` (see [`Head::log_appended`]). Replay first.
    pub(in crate::storage) fn start_wal(&mut self, wal: GroupCommit) {
        for Padded(shard) in self.shards.iter_mut() {
            shard.get_mut().log = Some(ShardLog::default());
        }
        self.wal = Some(Arc::new(wal));
    }

    /// The WAL, when the head writes one.
    pub fn wal(&self) -> Option<&GroupCommit> {
        self.wal.as_deref()
    }

    /// A shared handle to the WAL, for waiting on it after a commit.
    pub(in crate::storage) fn wal_handle(&self) -> Option<Arc<GroupCommit>> {
        self.wal.clone()
    }

    /// Hands ready WAL `frames` (records other than the shards' own, such
    /// as exemplars) to the WAL; the LSN that makes them durable (0
    /// without a WAL).
    pub(in crate::storage) fn log_frames(&self, frames: &[u8]) -> u64 {
        self.wal.as_ref().map_or(0, |w| w.submit(frames))
    }

    /// Stops the WAL after writing and fsyncing everything queued.
    pub(in crate::storage) fn close_wal(&self) {
        self.log_all();
        if let Some(wal) = &self.wal {
            wal.close();
        }
    }

    /// Hands what the shards in `counts.touched` appended to the WAL and
    /// returns the LSN that makes it durable (0 without a WAL): pass it to
    /// [`Head::durable`]. Whatever another request already handed over for
    /// these shards is covered too, since each shard remembers how far it
    /// pushed.
    pub(in crate::storage) fn log_appended(&self, counts: &mut AppendCounts) -> u64 {
        let touched = std::mem::take(&mut counts.touched);
        let Some(wal) = &self.wal else {
            return 0;
        };
        let touched = self
            .shards
            .iter()
            .enumerate()
            .filter(move |(i, _)| touched & (1 << (i % 64)) != 0);
        // The touched shards that are free now go in one submission, so a
        // request usually waits for one group commit, not one per shard;
        // each shard's frames are taken and queued under its lock, which
        // keeps its records in order in the log. A shard someone else
        // holds is waited for afterwards, alone, with no other lock held:
        // a request waiting here while holding the shards before it would
        // stall every writer that needs those (and a query thread in the
        // idle class, preempted while it holds a shard, can keep it for
        // milliseconds on a busy machine).
        let mut guards: Vec<parking_lot::MutexGuard<'_, Shard>> = Vec::new();
        let mut busy: Vec<&ShardCell> = Vec::new();
        for (_, Padded(cell)) in touched {
            match cell.try_lock() {
                Some(g) => guards.push(g),
                None => busy.push(cell),
            }
        }
        PENDING.with(|kept| {
            kept.with(|frames| {
                let mut lsn = submit_pending(wal, &mut guards, frames, &[]);
                drop(guards);
                for cell in busy {
                    let mut shard = [cell.lock_for_append(&self.lock_waits)];
                    lsn = lsn.max(submit_pending(wal, &mut shard, frames, &[]));
                }
                lsn
            })
        })
    }

    /// Copies every late sample older than `below` (what a cut hands to
    /// blocks) and logs the frames `marker` makes of the copy right after
    /// every record appended so far, all under every shard's lock: a late
    /// sample logged before the marker is in the copy, and one logged
    /// after is not. Returns the copy and the LSN that makes the marker
    /// durable (0 without a WAL, or when `marker` makes nothing).
    pub(in crate::storage) fn seal_late(
        &self,
        below: i64,
        marker: impl FnOnce(&[LateSeries]) -> Vec<u8>,
    ) -> (Vec<LateSeries>, u64) {
        // Every shard, in index order: an append holds one shard's lock
        // at a time, and `log_appended` waits for one only with none held.
        let mut guards: Vec<parking_lot::MutexGuard<'_, Shard>> =
            self.shards.iter().map(|Padded(cell)| cell.lock()).collect();
        let mut late = Vec::new();
        for (i, shard) in guards.iter().enumerate() {
            shard.late_before(below, |id, labels, samples, hists| {
                late.push(LateSeries {
                    shard: i,
                    id,
                    labels: labels
                        .into_iter()
                        .map(|l| (l.name.into(), l.value.into()))
                        .collect(),
                    samples,
                    hists,
                });
            });
        }
        let frame = marker(&late);
        let lsn = self.submit_after_pending(&mut guards, &frame);
        (late, lsn)
    }

    /// Logs `frame` right after every record appended so far (each
    /// shard's pending frames first), under every shard's lock: the series
    /// a record of `frame` refers to are defined before it in the log.
    /// The LSN that makes it durable (0 without a WAL, or for no frame).
    pub(in crate::storage) fn log_after_pending(&self, frame: &[u8]) -> u64 {
        // Every shard, in index order: an append holds one shard's lock
        // at a time, and `log_appended` waits for one only with none held.
        let mut guards: Vec<parking_lot::MutexGuard<'_, Shard>> =
            self.shards.iter().map(|Padded(cell)| cell.lock()).collect();
        self.submit_after_pending(&mut guards, frame)
    }

    /// The pending frames of every shard in `guards` (all of them,
    /// locked), then `frame`, in one submission; its LSN (0 without a WAL
    /// or for no frame).
    fn submit_after_pending(
        &self,
        guards: &mut [parking_lot::MutexGuard<'_, Shard>],
        frame: &[u8],
    ) -> u64 {
        let Some(wal) = self.wal.as_ref().filter(|_| !frame.is_empty()) else {
            return 0;
        };
        submit_pending(wal, guards, &mut Vec::new(), frame)
    }

    /// Drops exactly the late samples of `late` (a cut's copy, now in
    /// blocks); later ones, at other times, stay.
    pub(in crate::storage) fn drop_flushed(&self, late: &[LateSeries]) {
        for l in late {
            let mut times: Vec<i64> = l.samples.iter().map(|&(t, _)| t).collect();
            times.extend(l.hists.iter().map(|(t, _)| *t));
            times.sort_unstable();
            let Some(Padded(cell)) = self.shards.get(l.shard) else {
                continue;
            };
            let mut shard = cell.lock();
            shard.remove_late(l.id, &times);
            cell.publish(&shard);
        }
    }

    /// Hands every shard's pending records to the WAL; returns the LSN.
    pub(in crate::storage) fn log_all(&self) -> u64 {
        let mut counts = AppendCounts {
            touched: u64::MAX,
            ..AppendCounts::default()
        };
        self.log_appended(&mut counts)
    }

    /// Resolves when the WAL is durable up to `lsn` (at once without one).
    #[cfg(test)]
    pub(in crate::storage) fn durable(
        &self,
        lsn: u64,
    ) -> impl std::future::Future<Output = Result<(), crate::wal::commit::Stopped>> + Send {
        let wait = self.wal.as_ref().filter(|_| lsn > 0).map(|w| w.wait(lsn));
        async move {
            match wait {
                Some(w) => w.await,
                None => Ok(()),
            }
        }
    }

    /// Locks a shard, its log caught up with what the WAL has made durable
    /// (which decides what readers see, and from where new samples count
    /// as unlogged).
    /// An append's lock: a wait for it is counted (see
    /// [`Head::lock_waits`]).
    #[inline]
    pub(super) fn lock_caught_up<'a>(
        &self,
        cell: &'a ShardCell,
    ) -> parking_lot::MutexGuard<'a, Shard> {
        let mut shard = cell.lock_for_append(&self.lock_waits);
        self.catch_up(&mut shard);
        shard
    }

    /// Catches a locked shard's log up with what the WAL has made durable.
    #[inline]
    pub(super) fn catch_up(&self, shard: &mut Shard) {
        if let (Some(wal), Some(log)) = (&self.wal, shard.log.as_mut()) {
            log.catch_up(wal.durable_lsn());
        }
    }
}

/// Queues the pending frames of the shards in `guards` (locked), then
/// `extra`, in one submission through `frames` (cleared first); returns
/// the LSN that makes every shard's handed-over records durable (what
/// each pushed before counts too), or 0 when none has a log.
fn submit_pending(
    wal: &GroupCommit,
    guards: &mut [parking_lot::MutexGuard<'_, Shard>],
    frames: &mut Vec<u8>,
    extra: &[u8],
) -> u64 {
    frames.clear();
    for shard in guards.iter_mut() {
        if let Some(log) = &mut shard.log {
            log.samples.close(&mut log.frames);
            frames.extend_from_slice(&log.frames);
        }
    }
    frames.extend_from_slice(extra);
    let pushed = (!frames.is_empty()).then(|| wal.submit(frames));
    let mut lsn = 0;
    for shard in guards.iter_mut() {
        if let Some(log) = &mut shard.log {
            // A shard's frames are cleared only now, so those that had
            // some are the ones this submission covers.
            if let Some(p) = pushed.filter(|_| !log.frames.is_empty()) {
                log.handed_over(p);
                log.frames.clear();
                reuse::trim(&mut log.frames);
            }
            lsn = lsn.max(log.pushed);
        }
    }
    pushed.map_or(lsn, |p| lsn.max(p))
}

#[cfg(test)]
impl Head {
    /// Hands everything appended to the WAL and waits until it is durable
    /// (and so visible).
    pub(crate) fn log_and_wait(&self) {
        let lsn = self.log_all();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(self.durable(lsn))
            .expect("durable");
    }
}

/// One series' late samples a cut hands to blocks.
#[derive(Debug, Clone)]
pub(in crate::storage) struct LateSeries {
    /// Its shard.
    pub shard: usize,
    /// Its WAL reference.
    pub id: u64,
    /// Its labels, sorted.
    pub labels: Vec<(String, String)>,
    /// The float samples, in time order.
    pub samples: Vec<(i64, f64)>,
    /// The native histograms, in time order.
    pub hists: Vec<(i64, crate::histogram::HistSample)>,
}

thread_local! {
    /// One request's frames from all its shards, gathered for one submit.
    static PENDING: Reused<Vec<u8>> = const { Reused::new(Vec::new()) };
}
