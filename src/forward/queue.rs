//! One destination's queue: a thread reads the WAL from the saved position
//! as it becomes durable, deals samples to shards by series, and tracks
//! which records are wholly acknowledged, so the saved position only ever
//! moves past samples the destination has (or that were dropped, counted).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::destination::{Destination, Split};
use super::send::{self, Sample};
use super::stats::Stats;
use super::tracker::Tracker;
use crate::relabel::Relabeler;
use crate::wal::commit::Progress;
use crate::wal::reader::{self, Position, Reader};
use crate::wal::record::Record;

/// Bytes read from the log per turn.
const READ_BYTES: usize = 1 << 20;
/// Parts (one record's samples for one shard) queued per shard.
const SHARD_QUEUE: usize = 256;
/// How often a blocked reader looks at the lag and the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// A destination's queue, run on its own thread.
#[derive(Debug)]
pub(super) struct Queue {
    pub name: String,
    pub dest: Arc<Destination>,
    pub stats: Stats,
    pub wal_dir: PathBuf,
    pub data_dir: PathBuf,
    pub progress: watch::Receiver<Progress>,
    pub max_lag_bytes: u64,
    pub filter: Filter,
    pub stop: watch::Receiver<bool>,
    pub runtime: tokio::runtime::Handle,
}

/// Series references → canonical labels, as the log defines them.
/// A sample read from the log: series reference, timestamp, float value,
/// and for a native histogram its encoded remote-write message.
type Point = (u64, i64, f64, Option<Arc<[u8]>>);

/// A destination's running shards: their queues and tasks.
#[derive(Debug)]
pub(super) struct Shards {
    senders: Vec<mpsc::Sender<Vec<Sample>>>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Vec<Sample>>>>,
}

/// When the shard count was last weighed, and what the counters were.
#[derive(Debug)]
struct ScaleWindow {
    started: std::time::Instant,
    /// The retried and failed counters at the start.
    retried: u64,
    failed: u64,
    /// Windows in a row without any wait.
    idle: u32,
}

/// How often the shard count is weighed: often enough that a backlog
/// reaches `max-shards` within seconds (doubling each time).
const SCALE_EVERY: Duration = Duration::from_secs(1);
/// Quiet windows in a row before the shard count halves (30 s).
const IDLE_WINDOWS: u32 = 30;

/// Series references → canonical labels (`None`: another destination's
/// series, see [`Split`]) and the segment that defined them (0: a
/// checkpoint).
type SeriesMap = hashbrown::HashMap<u64, (Option<Arc<[u8]>>, u64)>;

/// What a destination does with a series' labels: whether it takes the
/// series (see [`Split`]), and how it relabels them.
#[derive(Debug, Clone)]
pub(super) struct Filter {
    pub split: Option<Split>,
    pub relabel: Relabeler,
}

impl Filter {
    /// The map entry of a series with canonical `labels` defined in
    /// `segment`: `None` labels when the series is not sent here.
    fn entry(&self, labels: &[u8], segment: u64) -> (Option<Arc<[u8]>>, u64) {
        if self.split.is_some_and(|s| !s.takes(labels)) {
            return (None, segment);
        }
        if self.relabel.is_empty() {
            return (Some(Arc::from(labels)), segment);
        }
        let Some(pairs) = crate::storage::labels::decode_canonical(labels) else {
            return (None, segment);
        };
        let mut map: std::collections::BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        if !self.relabel.apply(&mut map) {
            return (None, segment);
        }
        let mut out = Vec::with_capacity(labels.len());
        crate::storage::labels::encode_canonical(
            map.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            &mut out,
        );
        (Some(Arc::from(out)), segment)
    }
}

impl Queue {
    /// Where this destination starts, saved so its segments are held:
    /// its saved position, or for a new destination the log's durable end
    /// now. Decided before the thread starts (see [`super::Forwarders::start`]):
    /// a tenant's forwarders start as it opens, before its first write, and
    /// a thread scheduled late must not skip what was written meanwhile.
    pub(super) fn start_position(&self) -> Option<Position> {
        let start = match reader::load(&self.wal_dir, &self.name) {
            Ok(Some(p)) => p,
            Ok(None) => {
                // A new destination starts at the end: what is accepted
                // from now on.
                let end = self.progress.borrow().durable_at;
                tracing::info!(destination = %self.name, position = %end, "new forward destination; forwarding from the end of the WAL");
                end
            }
            Err(e) => {
                tracing::error!(destination = %self.name, error = %e, "cannot read the forward position; this destination is not forwarded");
                return None;
            }
        };
        // Hold the segments from here on before anything can delete them.
        if let Err(e) = reader::save(&self.wal_dir, &self.name, start) {
            tracing::error!(destination = %self.name, error = %e, "cannot save the forward position; this destination is not forwarded");
            return None;
        }
        Some(start)
    }

    /// Runs from `start` (see [`Queue::start_position`]) until the stop
    /// flag is set; then saves the position.
    pub(super) fn run(self, start: Position) {
        let series = self.known_series(start);
        self.stats.series.set(series.len() as i64);
        tracing::info!(destination = %self.name, url = %self.dest.url, position = %start, series = series.len(), "forwarding");
        let tracker = Arc::new(Tracker::new(start));
        let client = match send::Client::new(&self.dest) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(destination = %self.name, error = %e, "cannot set up the client; this destination is not forwarded");
                return;
            }
        };
        let shards = self.spawn_shards(self.dest.shard_range().0, &client, &tracker);
        let saver = self.runtime.spawn(save_loop(
            self.name.clone(),
            self.wal_dir.clone(),
            Arc::clone(&tracker),
            self.stats.clone(),
            self.progress.clone(),
            self.stop.clone(),
        ));
        let shards = self.read_loop(start, series, &tracker, shards, &client);
        self.drain(shards);
        let _ = self.runtime.block_on(saver);
        let at = tracker.released();
        match reader::save(&self.wal_dir, &self.name, at) {
            Ok(()) => {
                tracing::info!(destination = %self.name, position = %at, "forwarding stopped; position saved")
            }
            Err(e) => {
                tracing::error!(destination = %self.name, error = %e, "cannot save the forward position")
            }
        }
    }

    /// The labels of every series the log defines before `start`: the
    /// newest checkpoint's series, then the series records of the
    /// segments still on disk, in order.
    fn known_series(&self, start: Position) -> SeriesMap {
        let mut map = SeriesMap::new();
        let read_checkpoint = |map: &mut SeriesMap, only_missing: bool| {
            match crate::storage::checkpoint::read_series(&self.data_dir, |id, labels| {
                if !only_missing || !map.contains_key(&id) {
                    map.insert(id, self.filter.entry(labels, 0));
                }
            }) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(destination = %self.name, error = %e, "cannot read the checkpoint's series");
                    None
                }
            }
        };
        let first_checkpoint = read_checkpoint(&mut map, false);
        let first = crate::wal::segments(&self.wal_dir)
            .ok()
            .and_then(|s| s.first().copied())
            .unwrap_or(start.segment);
        let mut r = Reader::new(
            &self.wal_dir,
            Position {
                segment: first,
                offset: 0,
            },
        );
        while r.position() < start {
            let before = r.position();
            let read = r.read(start, READ_BYTES, |rec, after| {
                if let Record::Series { series_ref, labels } = rec {
                    map.insert(series_ref, self.filter.entry(labels, after.segment));
                }
            });
            match read {
                Ok(_) if r.position() == before => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(destination = %self.name, error = %e, "cannot read the WAL's series before the forward position");
                    break;
                }
            }
        }
        // A checkpoint taken meanwhile may have deleted segments not yet
        // read: their live series are in it.
        let newest = crate::storage::checkpoint::newest(&self.data_dir)
            .ok()
            .flatten();
        if newest.is_some() && newest != first_checkpoint {
            read_checkpoint(&mut map, true);
        }
        map
    }

    /// Starts `n` shards.
    fn spawn_shards(&self, n: usize, client: &send::Client, tracker: &Arc<Tracker>) -> Shards {
        self.stats.shards.set(n as i64);
        let mut out = Shards {
            senders: Vec::with_capacity(n),
            tasks: Vec::with_capacity(n),
        };
        for shard in 0..n {
            let (tx, rx) = mpsc::channel::<Vec<Sample>>(SHARD_QUEUE);
            out.senders.push(tx);
            out.tasks
                .push(self.runtime.spawn(send::run_shard(send::Shard {
                    name: self.name.clone(),
                    shard,
                    dest: Arc::clone(&self.dest),
                    client: client.clone(),
                    stats: self.stats.clone(),
                    tracker: Arc::clone(tracker),
                    rx,
                    stop: self.stop.clone(),
                })));
        }
        out
    }

    /// Closes the shards' queues and waits for each to finish the batch it
    /// is sending; what they had not sent, per shard in order.
    fn drain(&self, shards: Shards) -> Vec<Vec<Vec<Sample>>> {
        drop(shards.senders);
        shards
            .tasks
            .into_iter()
            .map(|t| self.runtime.block_on(t).unwrap_or_default())
            .collect()
    }

    /// How many shards the last window asks for, weighed every few
    /// seconds on the samples read and not yet acknowledged: twice as many
    /// when more than two batches per shard wait and the destination
    /// answered every send meanwhile (it is slow, not failing, so more
    /// sends at once help); half as many after [`IDLE_WINDOWS`] windows in
    /// a row with less than half a batch per shard waiting.
    fn want_shards(&self, n: usize, tracker: &Tracker, w: &mut ScaleWindow) -> usize {
        let (min, max) = self.dest.shard_range();
        if w.started.elapsed() < SCALE_EVERY {
            return n;
        }
        let failing = self.stats.retried.get() != w.retried || self.stats.failed.get() != w.failed;
        let waiting = tracker.outstanding();
        let batch = self.dest.max_samples_per_send as u64;
        let want = if waiting > 2 * batch * n as u64 && !failing {
            w.idle = 0;
            n * 2
        } else if waiting < batch * n as u64 / 2 {
            w.idle += 1;
            if w.idle >= IDLE_WINDOWS {
                w.idle = 0;
                n / 2
            } else {
                n
            }
        } else {
            w.idle = 0;
            n
        };
        w.started = std::time::Instant::now();
        w.retried = self.stats.retried.get();
        w.failed = self.stats.failed.get();
        want.clamp(min, max)
    }

    fn read_loop(
        &self,
        start: Position,
        mut series: SeriesMap,
        tracker: &Arc<Tracker>,
        mut shard_set: Shards,
        client: &send::Client,
    ) -> Shards {
        let mut reader = Reader::new(&self.wal_dir, start);
        let mut progress = self.progress.clone();
        let mut parts: Vec<Vec<Sample>> =
            (0..shard_set.senders.len()).map(|_| Vec::new()).collect();
        let mut shards = shard_set.senders.len() as u64;
        let mut window = ScaleWindow {
            started: std::time::Instant::now(),
            retried: self.stats.retried.get(),
            failed: self.stats.failed.get(),
            idle: 0,
        };
        // Set while samples are being given up for lag: dealt parts are
        // dropped until the reader is past the point given up to.
        let mut skip_to: Option<Position> = None;
        let mut last_lag_check = std::time::Instant::now();
        let mut segment = start.segment;
        let mut forgotten_through = 0u64;
        loop {
            if *self.stop.borrow() {
                return shard_set;
            }
            let want = self.want_shards(shard_set.senders.len(), tracker, &mut window);
            if want != shard_set.senders.len() && skip_to.is_none() {
                // Per-series order: the old shards send everything they
                // hold before the new ones start.
                tracing::info!(destination = %self.name, from = shard_set.senders.len(), to = want, "resharding");
                let unsent = self.drain(shard_set);
                shard_set = self.spawn_shards(want, client, tracker);
                parts = (0..want).map(|_| Vec::new()).collect();
                shards = want as u64;
                // Each series was on one old shard: dealing each old
                // shard's unsent parts in order keeps every series in order.
                let end = progress.borrow().durable_at;
                for part in unsent.into_iter().flatten() {
                    let mut split: Vec<Vec<Sample>> = (0..want).map(|_| Vec::new()).collect();
                    for sample in part {
                        let shard = (send::mix(sample.series) % shards) as usize;
                        split[shard].push(sample);
                    }
                    for (shard, p) in split.into_iter().enumerate() {
                        if !p.is_empty() {
                            if let Err(to) = self.deal(&shard_set.senders[shard], p, tracker, end) {
                                skip_to = Some(to);
                            }
                        }
                    }
                }
            }
            if reader.position().segment != segment {
                segment = reader.position().segment;
                match forget_removed_series(
                    &self.data_dir,
                    &mut series,
                    segment,
                    &mut forgotten_through,
                ) {
                    Ok(n) if n > 0 => {
                        tracing::debug!(destination = %self.name, forgotten = n, "forgot series the head removed")
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(destination = %self.name, error = %e, "cannot read the checkpoint's series")
                    }
                }
                self.stats.series.set(series.len() as i64);
            }
            let end = progress.borrow_and_update().durable_at;
            if skip_to.is_none() && last_lag_check.elapsed() >= POLL * 10 {
                last_lag_check = std::time::Instant::now();
                skip_to = self.over_lag(tracker, end);
            }
            if reader.position() >= end {
                let mut stop = self.stop.clone();
                self.runtime.block_on(async {
                    tokio::select! {
                        _ = progress.changed() => {}
                        _ = stop.changed() => {}
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                });
                continue;
            }
            let mut unknown = 0u64;
            let mut records = Vec::new();
            let read = reader.read(end, READ_BYTES, |rec, after| {
                // Floats and histograms alike: (ref, t, v, encoded histogram).
                let points: Box<dyn Iterator<Item = Point>> = match rec {
                    Record::Samples(samples) => Box::new(samples.map(|(r, t, v)| (r, t, v, None))),
                    Record::Histograms(entries) => Box::new(entries.map(|(r, t, h)| {
                        let mut msg = Vec::new();
                        crate::protocol::histogram::encode(t, &h, &mut msg);
                        (r, t, 0.0, Some(Arc::from(msg)))
                    })),
                    Record::Series { series_ref, labels } => {
                        series.insert(series_ref, self.filter.entry(labels, after.segment));
                        records.push((after, None));
                        return;
                    }
                    _ => {
                        records.push((after, None));
                        return;
                    }
                };
                let mut dealt = Vec::new();
                for (r, t, v, hist) in points {
                    let labels = match series.get(&r) {
                        Some((Some(labels), _)) => labels,
                        Some((None, _)) => continue,
                        None => {
                            unknown += 1;
                            continue;
                        }
                    };
                    let shard = (send::mix(r) % shards) as usize;
                    if parts[shard].is_empty() {
                        dealt.push(shard);
                    }
                    parts[shard].push(Sample {
                        seq: 0,
                        series: r,
                        labels: Arc::clone(labels),
                        t,
                        v,
                        hist,
                    });
                }
                let taken: Vec<(usize, Vec<Sample>)> = dealt
                    .into_iter()
                    .map(|s| (s, std::mem::take(&mut parts[s])))
                    .collect();
                records.push((after, Some(taken)));
            });
            if unknown > 0 {
                self.stats.dropped_unknown_series.inc_by(unknown);
            }
            if let Err(e) = read {
                tracing::error!(destination = %self.name, error = %e, "cannot read the WAL; trying again");
                self.runtime
                    .block_on(tokio::time::sleep(Duration::from_secs(1)));
                continue;
            }
            for (after, taken) in records {
                let skipping = skip_to.is_some_and(|to| after <= to);
                let Some(taken) = taken else {
                    tracker.push(after, 0);
                    continue;
                };
                let n: usize = taken.iter().map(|(_, p)| p.len()).sum();
                if skipping {
                    self.stats.dropped_lag.inc_by(n as u64);
                    tracker.push(after, 0);
                    continue;
                }
                let seq = tracker.push(after, u32::try_from(n).unwrap_or(u32::MAX));
                for (shard, mut part) in taken {
                    for s in &mut part {
                        s.seq = seq;
                    }
                    if let Err(given_up) = self.deal(&shard_set.senders[shard], part, tracker, end)
                    {
                        skip_to = Some(given_up);
                    }
                }
            }
            if let Some(to) = skip_to {
                if reader.position() >= to {
                    let dropped = tracker.give_up_through(to);
                    self.stats.dropped_lag.inc_by(dropped);
                    tracing::warn!(destination = %self.name, position = %to, "forward lag past forward-max-lag-bytes: gave up the oldest unsent samples");
                    skip_to = None;
                }
            }
        }
    }

    /// Queues `part` on a shard; while the shard is full, watches the lag
    /// and the stop flag. `Err` with the position to give up to when the
    /// lag bound is passed meanwhile (the part is then counted dropped).
    fn deal(
        &self,
        tx: &mpsc::Sender<Vec<Sample>>,
        part: Vec<Sample>,
        tracker: &Tracker,
        end: Position,
    ) -> Result<(), Position> {
        loop {
            if let Ok(permit) = tx.try_reserve() {
                permit.send(part);
                return Ok(());
            }
            let room = self
                .runtime
                .block_on(async { tokio::time::timeout(POLL, tx.reserve()).await });
            match room {
                Ok(Ok(permit)) => {
                    permit.send(part);
                    return Ok(());
                }
                Ok(Err(_)) => return Ok(()), // the shard is gone: stopping
                Err(_) => {}                 // still full: look at the lag
            }
            if *self.stop.borrow() {
                return Ok(());
            }
            let end = end.max(self.progress.borrow().durable_at);
            if let Some(to) = self.over_lag(tracker, end) {
                let seq = part.first().map_or(0, |s| s.seq);
                self.stats.dropped_lag.inc_by(part.len() as u64);
                tracker.ack(seq, u32::try_from(part.len()).unwrap_or(u32::MAX));
                return Err(to);
            }
        }
    }

    /// Where to give up to when the log between the released position and
    /// `end` is larger than the bound: the start of the oldest segment
    /// that, with everything after it, fits.
    fn over_lag(&self, tracker: &Tracker, end: Position) -> Option<Position> {
        let released = tracker.released();
        let sizes = segment_sizes(&self.wal_dir, released.segment, end);
        let pending: u64 = pending_bytes(&sizes, released, end);
        self.stats
            .pending_bytes
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        if pending <= self.max_lag_bytes {
            return None;
        }
        // Keep whole segments from the newest back while they fit; the
        // segment being written always stays.
        let mut kept = end.offset;
        let mut from = end.segment;
        for &(segment, size) in sizes.iter().rev() {
            if segment >= end.segment {
                continue;
            }
            if kept + size > self.max_lag_bytes {
                break;
            }
            kept += size;
            from = segment;
        }
        let to = Position {
            segment: from,
            offset: 0,
        };
        // Within the segment being written nothing more can be given up.
        (to > released).then_some(to)
    }
}

/// Keeps the series map as large as the head: once the reader (at
/// `segment`) is past the segments a newer checkpoint covers, a series
/// defined in them that the checkpoint no longer holds was removed
/// (retention), and no later record can name it. `done` is the checkpoint
/// last applied; the series forgotten.
fn forget_removed_series(
    data_dir: &std::path::Path,
    series: &mut SeriesMap,
    segment: u64,
    done: &mut u64,
) -> Result<usize, crate::wal::WalError> {
    let Some(newest) = crate::storage::checkpoint::newest(data_dir)? else {
        return Ok(0);
    };
    if newest <= *done || newest >= segment {
        return Ok(0);
    }
    let mut live = hashbrown::HashSet::new();
    let read = crate::storage::checkpoint::read_series(data_dir, |id, _| {
        live.insert(id);
    })?;
    let Some(read) = read.filter(|&r| r < segment) else {
        return Ok(0);
    };
    let before = series.len();
    series.retain(|id, (_, defined)| *defined > read || live.contains(id));
    if series.len() < series.capacity() / 4 {
        series.shrink_to_fit();
    }
    *done = read;
    Ok(before - series.len())
}

/// `(segment, bytes)` of the segments from `first` through `end`'s.
fn segment_sizes(dir: &std::path::Path, first: u64, end: Position) -> Vec<(u64, u64)> {
    crate::wal::segments(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|&s| s >= first && s <= end.segment)
        .map(|s| {
            let len = std::fs::metadata(dir.join(format!("{s:08}"))).map_or(0, |m| m.len());
            (s, if s == end.segment { end.offset } else { len })
        })
        .collect()
}

fn pending_bytes(sizes: &[(u64, u64)], from: Position, end: Position) -> u64 {
    if from >= end {
        return 0;
    }
    let total: u64 = sizes.iter().map(|&(_, b)| b).sum();
    let before = if sizes.first().is_some_and(|&(s, _)| s == from.segment) {
        from.offset
    } else {
        0
    };
    total.saturating_sub(before)
}

/// Saves the released position whenever it moves (each save is fsynced,
/// so quick successive acknowledgements share one), and keeps the lag
/// gauges current.
async fn save_loop(
    name: String,
    wal_dir: PathBuf,
    tracker: Arc<Tracker>,
    stats: Stats,
    progress: watch::Receiver<Progress>,
    mut stop: watch::Receiver<bool>,
) {
    let mut saved = tracker.released();
    let mut failing = false;
    loop {
        tokio::select! {
            () = tracker.moved.notified() => {}
            _ = stop.changed() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let now = tracker.released();
        let end = progress.borrow().durable_at;
        let sizes = segment_sizes(&wal_dir, now.segment, end);
        stats
            .pending_bytes
            .set(i64::try_from(pending_bytes(&sizes, now, end)).unwrap_or(i64::MAX));
        let highest = stats.highest_sent_seconds.get();
        if highest > 0.0 {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            stats.lag_seconds.set((wall - highest).max(0.0));
        }
        if now == saved {
            continue;
        }
        let (dir, n) = (wal_dir.clone(), name.clone());
        let result = tokio::task::spawn_blocking(move || reader::save(&dir, &n, now)).await;
        match result {
            Ok(Ok(())) => {
                saved = now;
                failing = false;
            }
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::error!(destination = %name, error = %e, "cannot save the forward position; retrying");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(segment: u64, offset: u64) -> Position {
        Position { segment, offset }
    }

    #[test]
    fn series_a_newer_checkpoint_no_longer_holds_are_forgotten_once_read_past() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut file = Vec::new();
        for id in [1u64, 2] {
            crate::wal::record::encode_checkpoint(&mut file, |out| {
                crate::encoding::put_uvarint(out, id);
                crate::encoding::put_uvarint(out, 1);
                out.push(b'x');
            });
        }
        std::fs::write(dir.path().join("checkpoint.00000003"), &file).expect("checkpoint");
        let labels: Arc<[u8]> = Arc::from(&b"x"[..]);
        let mut map: SeriesMap = [(1, 2), (3, 2), (4, 5), (5, 0)]
            .into_iter()
            .map(|(id, seg)| (id, (Some(Arc::clone(&labels)), seg)))
            .collect();
        let mut done = 0;
        // Still reading segments the checkpoint covers: nothing yet.
        let n = forget_removed_series(dir.path(), &mut map, 3, &mut done).expect("gc");
        assert_eq!((n, map.len(), done), (0, 4, 0));
        let n = forget_removed_series(dir.path(), &mut map, 4, &mut done).expect("gc");
        let mut kept: Vec<u64> = map.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!((n, kept, done), (2, vec![1, 4], 3));
    }

    #[test]
    fn pending_bytes_run_from_the_released_position_to_the_end() {
        let sizes = [(3, 100), (4, 100), (5, 40)];
        assert_eq!(pending_bytes(&sizes, at(3, 30), at(5, 40)), 70 + 100 + 40);
        assert_eq!(pending_bytes(&sizes, at(5, 40), at(5, 40)), 0);
    }
}
