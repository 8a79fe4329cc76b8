//! Handing the head's oldest chunks to blocks on disk, as Prometheus'
//! head compaction does: once the head spans more than 1.5 block ranges,
//! the oldest whole range (aligned, 2 h by default) is written as a block,
//! published to queries, and only then dropped from the head.
//!
//! A crash at any step starts cleanly: an unfinished `<ULID>.tmp` is
//! removed at start and the head still holds everything (the WAL and the
//! checkpoint were not touched); a finished block moves the floor, and the
//! start drops what the checkpoint and WAL replay restore below it.
//!
//! Late samples (out of order, within the window) older than the range's
//! end go to blocks as well: those in the range merged into its block,
//! older ones into an out-of-order block per range, which compaction later
//! merges with the block it overlaps. The cut copies them and logs a WAL
//! record naming the blocks in one step under every shard's lock; replay
//! drops the late samples logged before that record once all those blocks
//! exist, and keeps them (for the next cut) when a crash came first.

use std::time::Instant;

use super::block::compact::{block_ranges, CompactError};
use super::block::tombstones::Tombstones;
use super::block::{write_block_as, BlockChunk, BlockMeta, BlockSeries, Compaction, Ulid};
use super::blocks::{float_chunks, hist_chunks, trim_chunk, untangle_chunks, Block, Blocks};
use super::head::{Head, HeadOptions, LateSeries};
use crate::histogram::HistSample;
use crate::wal::record::encode_flushed;

/// Why a block could not be cut.
#[derive(Debug, thiserror::Error)]
#[error("writing a block for [{min_time}, {max_time}): {what}")]
pub struct CutError {
    /// The range's start.
    pub min_time: i64,
    /// The range's end (exclusive).
    pub max_time: i64,
    /// What went wrong.
    pub what: String,
}

/// Writes blocks while `head` spans more than 1.5 block ranges (the
/// head's chunk range), oldest range first, publishes them in `blocks`
/// and drops what they hold from the head. Late samples older than the
/// range's end go with it: those in the range merged into its block,
/// older ones into a block of their own per range (Prometheus'
/// out-of-order blocks, which overlap the in-order ones until compaction
/// merges them). Does nothing without a data directory. `now_ms` names
/// the blocks.
pub(super) fn cut_blocks(
    head: &Head,
    blocks: &Blocks,
    now_ms: u64,
) -> Result<Vec<BlockMeta>, CutError> {
    let Some(dir) = blocks.dir().map(std::path::Path::to_path_buf) else {
        return Ok(Vec::new());
    };
    let range = head.options().chunk_range_ms;
    let mut cut = Vec::new();
    // The end of the last range this pass let go without a block (all of
    // it deleted): no block raised the floor there, yet the head holds
    // nothing older in order (what crosses it stays for the next range).
    let mut passed = i64::MIN;
    loop {
        let floor = blocks.floor().max(passed);
        let Some((lo, hi)) = head.span_from(floor) else {
            break;
        };
        if hi.saturating_sub(lo) <= range / 2 * 3 {
            break;
        }
        let min_time = lo.div_euclid(range) * range;
        let max_time = min_time + range;
        let fail = |what: String| {
            blocks.note_failure();
            CutError {
                min_time,
                max_time,
                what,
            }
        };
        // From here on nothing lands in order below the block's end: an
        // append that took its shard's lock before this store is in what
        // `chunks_between` copies (it locks every shard after it); later
        // ones there go out of order.
        head.raise_cut_floor(max_time);
        let started = Instant::now();
        let deleted = head.deleted();
        let in_order = head.chunks_between(min_time, max_time);
        // Whether the head held anything in order here, deleted or not:
        // when all of it was, the range is let go without a block.
        let held = !in_order.is_empty();
        let in_order = without_deleted(in_order, &deleted).map_err(&fail)?;
        // The late samples older than the block's end, and a WAL record
        // naming the blocks that will hold them, logged in one step: at
        // replay, once those blocks exist, what was logged before it
        // below the end is theirs.
        let mut planned: Vec<(i64, Ulid)> = Vec::new();
        let (late, lsn) = head.seal_late(max_time, |late| {
            let mut starts: Vec<i64> = late
                .iter()
                .flat_map(|l| {
                    let floats = l.samples.iter().map(|&(t, _)| t);
                    let all = floats.chain(l.hists.iter().map(|(t, _)| *t));
                    let gone = deleted.get(l.id);
                    all.filter(move |&t| !gone.is_some_and(|r| r.contains(t)))
                })
                .map(|t| t.div_euclid(range) * range)
                .collect();
            if !in_order.is_empty() {
                starts.push(min_time);
            }
            starts.sort_unstable();
            starts.dedup();
            planned = starts.into_iter().map(|s| (s, Ulid::new(now_ms))).collect();
            let mut frame = Vec::new();
            if !planned.is_empty() {
                let names: Vec<u128> = planned.iter().map(|(_, u)| u.0).collect();
                encode_flushed(&mut frame, max_time, &names);
            }
            frame
        });
        if planned.is_empty() {
            if !held && late.is_empty() {
                break;
            }
            // Everything the head held here was deleted: it goes with
            // no block written (as Prometheus writes none of no samples).
            let dropped = head.truncate_in_order(max_time);
            head.drop_flushed(&late);
            tracing::info!(
                min_time,
                max_time,
                head_chunks_dropped = dropped.chunks,
                late_series = late.len(),
                "head range deleted whole: no block written"
            );
            passed = max_time;
            continue;
        }
        if lsn > 0 {
            if let Some(wal) = head.wal() {
                wal.rotate()
                    .map_err(|e| fail(format!("the WAL could not make the cut durable: {e:?}")))?;
            }
        }
        let mut written: Vec<Block> = Vec::with_capacity(planned.len());
        let mut in_order = Some(in_order);
        for &(start, ulid) in &planned {
            let of_range = late_in(&late, start, start + range, head.options(), &deleted);
            let (series, compaction) = match start == min_time {
                true => (
                    with_late(in_order.take().unwrap_or_default(), of_range),
                    Compaction::default(),
                ),
                false => (
                    of_range,
                    Compaction {
                        from_out_of_order: true,
                        ..Compaction::default()
                    },
                ),
            };
            let done = write_block_as(&dir, series, (start, start + range), ulid, compaction)
                .map_err(|e| e.to_string())
                .and_then(|meta| {
                    Block::open(&dir.join(meta.ulid.to_string()))
                        .map_err(|e| format!("the block written does not read back: {e}"))
                });
            match done {
                Ok(b) => written.push(b),
                Err(what) => {
                    // None of this cut is published: the head keeps it all
                    // and the next pass tries again; the WAL record names
                    // blocks that will never exist, so replay ignores it.
                    for b in &written {
                        let _ = std::fs::remove_dir_all(b.dir());
                    }
                    return Err(fail(what));
                }
            }
        }
        crate::crash::point("block-written");
        let mut metas = Vec::with_capacity(written.len());
        for b in written {
            metas.push(b.meta().clone());
            blocks.publish(b, started.elapsed());
        }
        let dropped = head.truncate_in_order(max_time);
        head.drop_flushed(&late);
        crate::crash::point("head-truncated");
        for meta in metas {
            tracing::info!(
                block = %meta.ulid,
                min_time = meta.min_time,
                max_time = meta.max_time,
                out_of_order = meta.compaction.from_out_of_order,
                series = meta.num_series,
                samples = meta.num_samples,
                head_chunks_dropped = dropped.chunks,
                head_series_removed = dropped.series,
                seconds = format_args!("{:.3}", started.elapsed().as_secs_f64()),
                "block written from the head"
            );
            cut.push(meta);
        }
    }
    Ok(cut)
}

/// The late samples of `late` in `[lo, hi)` that `deleted` leaves, as
/// block series: floats in XOR chunks, histograms encoded as the head
/// encodes them.
fn late_in(
    late: &[LateSeries],
    lo: i64,
    hi: i64,
    opts: &HeadOptions,
    deleted: &Tombstones,
) -> Vec<BlockSeries> {
    late.iter()
        .filter_map(|l| {
            let gone = deleted.get(l.id);
            let within = |t: i64| lo <= t && t < hi && !gone.is_some_and(|r| r.contains(t));
            let floats: Vec<(i64, f64)> =
                l.samples.iter().filter(|s| within(s.0)).copied().collect();
            let hists: Vec<(i64, HistSample)> =
                l.hists.iter().filter(|h| within(h.0)).cloned().collect();
            let mut chunks = float_chunks(&floats);
            chunks.extend(hist_chunks(&hists, opts));
            // Floats and histograms of one series may interleave in time.
            untangle_chunks(&mut chunks);
            // Late samples keep no start times (they are noted in order).
            (!chunks.is_empty()).then(|| BlockSeries {
                labels: l.labels.clone(),
                chunks,
                starts: Vec::new(),
            })
        })
        .collect()
}

/// The head's series of a range (by id) without the samples `deleted`
/// names: a chunk that holds some is encoded again without them, and a
/// series left with none is dropped.
fn without_deleted(
    series: Vec<(u64, BlockSeries)>,
    deleted: &Tombstones,
) -> Result<Vec<BlockSeries>, String> {
    let mut out = Vec::with_capacity(series.len());
    for (id, mut s) in series {
        if let Some(ranges) = deleted.get(id) {
            let mut kept = Vec::with_capacity(s.chunks.len());
            for c in std::mem::take(&mut s.chunks) {
                if ranges.overlaps(c.mint, c.maxt) {
                    kept.extend(trim_chunk(c, ranges).map_err(|e| e.to_string())?);
                } else {
                    kept.push(c);
                }
            }
            if kept.is_empty() {
                continue;
            }
            s.chunks = kept;
        }
        out.push(s);
    }
    Ok(out)
}

/// `in_order` series of a range with the `late` ones of that range merged
/// in: each time once, an in-order sample winning over a late one.
fn with_late(in_order: Vec<BlockSeries>, late: Vec<BlockSeries>) -> Vec<BlockSeries> {
    let mut by_labels: std::collections::HashMap<Vec<(String, String)>, Vec<BlockChunk>> =
        late.into_iter().map(|s| (s.labels, s.chunks)).collect();
    let mut out: Vec<BlockSeries> = in_order
        .into_iter()
        .map(|mut s| {
            if let Some(extra) = by_labels.remove(&s.labels) {
                s.chunks.extend(extra);
            }
            // Also in order alone: a float chunk may span a histogram
            // of the series (float, histogram, float), which a block's
            // chunks may not.
            untangle_chunks(&mut s.chunks);
            s
        })
        .collect();
    out.extend(by_labels.into_iter().map(|(labels, chunks)| BlockSeries {
        labels,
        chunks,
        starts: Vec::new(),
    }));
    out
}

/// Compacts `blocks`, as Prometheus does, over ranges that step by 3
/// from the head's block range up to the largest configured; returns
/// the new blocks' metas. `keep_going` is asked between series.
pub(super) fn compact_blocks(
    head: &Head,
    blocks: &Blocks,
    now_ms: u64,
    keep_going: &dyn Fn() -> bool,
) -> Result<Vec<BlockMeta>, CompactError> {
    let o = head.options();
    let ranges = block_ranges(o.chunk_range_ms, o.max_block_range_ms);
    blocks.compact(&ranges, now_ms, keep_going)
}

#[cfg(test)]
mod tests {
    use crate::histogram::{HistSample, Histogram, Span};
    use crate::storage::head::{AppendCounts, Durability};
    use crate::storage::index::{MatchOp, Matcher};
    use crate::storage::labels::encode_canonical;
    use crate::storage::Stop;
    use crate::storage::{Close, Db, DbOptions};
    use crate::wal::commit::FsyncMode;
    use crate::wal::WalOptions;

    const H: i64 = 3_600_000;

    fn durability(dir: &std::path::Path) -> Durability {
        Durability {
            dir: dir.to_owned(),
            wal: WalOptions {
                segment_bytes: 1 << 20,
                repair: crate::wal::Repair::Refuse,
                reserve_bytes: 0,
            },
            fsync: FsyncMode::Always,
        }
    }

    fn open(dir: &std::path::Path) -> Db {
        Db::open(DbOptions {
            durability: Some(durability(dir)),
            ..DbOptions::default()
        })
        .expect("opens")
    }

    fn hist(i: u64) -> HistSample {
        HistSample::Int(Histogram {
            schema: 0,
            count: i * 3,
            sum: i as f64,
            positive_spans: vec![Span {
                offset: 0,
                length: 2,
            }],
            positive_buckets: vec![i as i64, i as i64],
            zero_count: i,
            zero_threshold: 1e-128,
            ..Histogram::default()
        })
    }

    /// 20 float series and one histogram series, a sample a minute from
    /// `from` up to (not including) `to`, logged durably.
    fn fill(head: &Db, from: i64, to: i64) {
        let mut c = AppendCounts::default();
        for k in 0..20 {
            let k = k.to_string();
            let labels = [("__name__", "up"), ("k", k.as_str())];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            let samples = (from..to).step_by(60_000).map(|t| (t, (t / 60_000) as f64));
            head.head()
                .append_labels(&labels, &raw, samples, i64::MAX, &mut c)
                .expect("fits");
        }
        let labels = [("__name__", "lat")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let samples: Vec<_> = (from..to)
            .step_by(60_000)
            .map(|t| (t, hist((t / 60_000) as u64)))
            .collect();
        head.head()
            .append_histograms(&labels, &raw, &samples, i64::MAX, &mut c)
            .expect("fits");
        head.head().log_and_wait();
    }

    type Everything = Vec<(Vec<crate::storage::labels::Label>, Vec<(i64, f64)>, usize)>;

    /// Every series: labels, float samples, histogram count.
    fn everything(head: &Db) -> Everything {
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        head.querier()
            .select_until(&[all], i64::MIN, i64::MAX, &Stop::default())
            .expect("no stop")
            .into_iter()
            .map(|s| {
                let floats = s.samples(i64::MIN, i64::MAX).collect();
                (s.labels, floats, s.histograms.len())
            })
            .collect()
    }

    /// Appends `samples` one request each to `up{k="0"}`, as the ingest
    /// path does (the head's newest moves with each).
    fn append_each(head: &Db, samples: &[(i64, f64)]) -> AppendCounts {
        let labels = [("__name__", "up"), ("k", "0")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let mut all = AppendCounts::default();
        for &(t, v) in samples {
            let mut app = head.appender(i64::MAX);
            let mut c = AppendCounts::default();
            app.append_new(&labels, &raw, std::iter::once((t, v)), &mut c)
                .expect("fits");
            all.appended += c.appended;
            all.out_of_order += c.out_of_order;
            for (a, b) in all.rejected.iter_mut().zip(c.rejected) {
                *a += b;
            }
            let commit = app.commit();
            drop(commit);
        }
        head.head().log_and_wait();
        all
    }

    fn ooo_db(dir: &std::path::Path, window_ms: i64) -> Db {
        Db::open(DbOptions {
            durability: Some(durability(dir)),
            head: crate::storage::HeadOptions {
                ooo_window_ms: window_ms,
                ooo_cap: 4,
                ..Default::default()
            },
            ..DbOptions::default()
        })
        .expect("opens")
    }

    proptest::proptest! {
        /// Samples of a few series sent one request each, in any order,
        /// within the window: exactly the samples a sorted sending stores,
        /// each once (an exact repeat is accepted and not stored again).
        #[test]
        fn any_order_within_the_window_stores_what_sorted_order_stores(
            times in proptest::collection::btree_set(0i64..2_000, 1..120),
            series in 1usize..4,
            repeats in proptest::collection::vec(0usize..120, 0..10),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let sent: Vec<(usize, i64, f64)> = times
                .iter()
                .enumerate()
                .map(|(i, &t)| (i % series, t * 1_000, (t as f64).sin()))
                .collect();
            let mut shuffled = sent.clone();
            // A deterministic shuffle from the seed.
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            for &r in &repeats {
                if let Some(&s) = sent.get(r % sent.len()) {
                    shuffled.push(s);
                }
            }
            let store = |order: &[(usize, i64, f64)]| {
                let db = Db::new(crate::storage::HeadOptions {
                    ooo_window_ms: 10_000_000,
                    ooo_cap: 5,
                    ..Default::default()
                });
                for &(k, t, v) in order {
                    let k = k.to_string();
                    let labels = [("__name__", "m"), ("k", k.as_str())];
                    let mut raw = Vec::new();
                    encode_canonical(labels.iter().copied(), &mut raw);
                    let mut app = db.appender(i64::MAX);
                    let mut c = AppendCounts::default();
                    app.append_new(&labels, &raw, std::iter::once((t, v)), &mut c)
                        .expect("fits");
                    assert_eq!(c.rejected_total(), 0);
                    drop(app.commit());
                }
                everything(&db)
            };
            let sorted = store(&sent);
            let any = store(&shuffled);
            proptest::prop_assert_eq!(&any, &sorted);
            let stored: usize = any.iter().map(|s| s.1.len()).sum();
            proptest::prop_assert_eq!(stored, sent.len());
        }
    }

    #[test]
    fn late_samples_within_the_window_are_kept_through_a_cut_a_checkpoint_and_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = ooo_db(dir.path(), 6 * H);
        // Every other minute in order over 5h, then the minutes between,
        // newest first: late, all within the window.
        let even: Vec<(i64, f64)> = (0..150).map(|i| (i * 120_000, i as f64)).collect();
        let odd: Vec<(i64, f64)> = (0..149)
            .rev()
            .map(|i| (i * 120_000 + 60_000, -(i as f64)))
            .collect();
        let c = append_each(&head, &even);
        assert_eq!((c.appended, c.out_of_order), (150, 0));
        let c = append_each(&head, &odd);
        assert_eq!((c.appended, c.out_of_order), (149, 149));
        // A different value at a time held is a duplicate; the same value
        // is accepted and not stored twice.
        let c = append_each(&head, &[(60_000, 7.0), (120_000, 1.0), (180_000, -1.0)]);
        assert_eq!((c.appended, c.rejected, c.out_of_order), (2, [0, 1, 0], 0));
        let mut want: Vec<(i64, f64)> = even.iter().chain(&odd).copied().collect();
        want.sort_by_key(|s| s.0);
        let got = |head: &Db| {
            everything(head)
                .into_iter()
                .find(|s| s.0.iter().any(|l| l.value == "0"))
                .map(|s| s.1)
                .unwrap_or_default()
        };
        assert_eq!(got(&head), want);
        assert_eq!(head.head_stats().samples, 299);

        // The cut writes [0, 2h) with the late samples merged in; what is
        // left of them stays in the head.
        let cut = head.cut_blocks(1).expect("cut");
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].num_samples, 120);
        assert_eq!(got(&head), want);
        // Older than the cut, within the window: late, kept in the head
        // until a cut writes it into a block of its own. The head cannot
        // see what blocks hold, so another value at a time a block holds
        // is taken too (as in Prometheus), and reads keep the block's.
        // Older than a narrower window: out of bounds.
        let c = append_each(&head, &[(90_000, 1.5), (120_000, 5.0)]);
        assert_eq!((c.appended, c.out_of_order, c.rejected), (2, 2, [0, 0, 0]));
        want.push((90_000, 1.5));
        want.sort_by_key(|s| s.0);
        assert_eq!(got(&head), want, "a block and a late sample older than it");
        head.head().set_ooo_window(H);
        let c = append_each(&head, &[(3 * H + 30_000, 1.0), (4 * H + 30_000, 1.0)]);
        assert_eq!((c.rejected, c.out_of_order), ([0, 0, 1], 1));
        want.push((4 * H + 30_000, 1.0));
        want.sort_by_key(|s| s.0);

        // Through a checkpoint, then through the log alone.
        head.close(Close::Checkpoint);
        drop(head);
        let head = ooo_db(dir.path(), 0);
        assert_eq!(got(&head), want, "after the checkpoint");
        let more: Vec<(i64, f64)> = vec![(297 * 60_000 + 30_000, 0.5)];
        let head2 = {
            head.head().set_ooo_window(H);
            let c = append_each(&head, &more);
            assert_eq!(c.out_of_order, 1);
            head.close(Close::WalOnly);
            drop(head);
            ooo_db(dir.path(), 0)
        };
        want.push(more[0]);
        want.sort_by_key(|s| s.0);
        assert_eq!(got(&head2), want, "after the log's replay");

        // Two more hours in order: the next cut writes [2h, 4h) and the
        // late sample older than the first block into an out-of-order
        // block of [0, 2h); compaction merges the two blocks of [0, 2h).
        let next: Vec<(i64, f64)> = (150..210).map(|i| (i * 120_000, i as f64)).collect();
        append_each(&head2, &next);
        want.extend(&next);
        want.sort_by_key(|s| s.0);
        let cut = head2.cut_blocks(2).expect("cut");
        let ranges: Vec<(i64, i64, bool)> = cut
            .iter()
            .map(|m| (m.min_time, m.max_time, m.compaction.from_out_of_order))
            .collect();
        assert_eq!(ranges, [(0, 2 * H, true), (2 * H, 4 * H, false)]);
        assert_eq!(cut[0].num_samples, 2);
        assert_eq!(got(&head2), want, "overlapping blocks read as one");
        head2.close(Close::WalOnly);
        drop(head2);
        // The replay drops what the log says the blocks hold: the late
        // sample is read once, from its block.
        let head3 = ooo_db(dir.path(), 0);
        assert_eq!(got(&head3), want, "after a replay past the cut");
        let in_head = |db: &Db| {
            let m = Matcher::new(MatchOp::Equal, "k", "0").expect("m");
            db.head()
                .querier()
                .select_samples(&[m], 0, H)
                .iter()
                .map(|s| s.samples.len())
                .sum::<usize>()
        };
        assert_eq!(in_head(&head3), 0, "the head holds nothing blocks hold");
        let merged = head3.compact_blocks(3, &|| true).expect("compacts");
        assert_eq!(merged.len(), 1);
        assert_eq!((merged[0].min_time, merged[0].max_time), (0, 2 * H));
        assert!(!merged[0].compaction.from_out_of_order);
        assert_eq!(got(&head3), want, "after vertical compaction");
        head3.close(Close::WalOnly);
    }

    /// Native histograms late within the window, as floats: newer and
    /// older than the newest block, merged in reads, through a checkpoint
    /// and a replay, into blocks, and through vertical compaction; a float
    /// at a histogram's time (or another histogram there) is a duplicate.
    #[test]
    fn late_histograms_are_kept_read_cut_and_compacted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = ooo_db(dir.path(), 6 * H);
        let labels = [("__name__", "lat"), ("k", "0")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let send = |db: &Db, samples: Vec<(i64, HistSample)>| {
            let mut c = AppendCounts::default();
            for s in samples {
                let mut app = db.appender(i64::MAX);
                app.append_histograms(&labels, &raw, &[s], &mut c)
                    .expect("fits");
                drop(app.commit());
            }
            db.head().log_and_wait();
            c
        };
        let at = |i: i64| (i * 120_000, hist(i as u64));
        // Every other minute in order over 5h, then the minutes between
        // in the first 4h, newest first.
        let c = send(&db, (0..150).map(at).collect());
        assert_eq!((c.appended, c.out_of_order), (150, 0));
        let late = |i: i64| (i * 120_000 + 60_000, hist(1000 + i as u64));
        let c = send(&db, (0..120).rev().map(late).collect());
        assert_eq!((c.appended, c.out_of_order), (120, 120));
        // The same histogram again is taken once; another is a duplicate,
        // and so is a float at a histogram's time.
        let c = send(&db, vec![late(3), (late(4).0, hist(7)), at(5)]);
        assert_eq!((c.appended, c.rejected, c.out_of_order), (2, [0, 1, 0], 0));
        let mut float = AppendCounts::default();
        let mut app = db.appender(i64::MAX);
        app.append_new(&labels, &raw, std::iter::once((late(6).0, 1.0)), &mut float)
            .expect("fits");
        drop(app.commit());
        assert_eq!(float.rejected, [0, 1, 0]);
        let mut want: Vec<i64> = (0..150)
            .map(|i| at(i).0)
            .chain((0..120).map(|i| late(i).0))
            .collect();
        want.sort_unstable();
        let got = |db: &Db| {
            let m = Matcher::new(MatchOp::Equal, "__name__", "lat").expect("m");
            let s = db
                .querier()
                .select_until(&[m], i64::MIN, i64::MAX, &Stop::default())
                .expect("no stop");
            s.into_iter()
                .flat_map(|s| s.histograms)
                .map(|(t, h)| {
                    let n = match h {
                        HistSample::Int(h) => h.zero_count as i64,
                        HistSample::Float(h) => h.zero_count as i64,
                    };
                    (t, n)
                })
                .collect::<Vec<(i64, i64)>>()
        };
        let check = |db: &Db, when: &str| {
            let g = got(db);
            assert_eq!(g.iter().map(|s| s.0).collect::<Vec<_>>(), want, "{when}");
            for (t, n) in g {
                let i = t / 120_000;
                let expect = if t % 120_000 == 0 { i } else { 1000 + i };
                assert_eq!(n, expect, "{when}: value at {t}");
            }
        };
        check(&db, "as sent");
        // The cut writes [0, 2h) with the late ones in it merged; a late
        // histogram older than it is taken and kept beside the block.
        assert_eq!(db.cut_blocks(1).expect("cut").len(), 1);
        check(&db, "after a cut");
        let c = send(&db, vec![(30_000, hist(30))]);
        assert_eq!(c.out_of_order, 1);
        want.push(30_000);
        want.sort_unstable();
        let check_with_old = |db: &Db, want: &[i64], when: &str| {
            let g = got(db);
            assert_eq!(g.iter().map(|s| s.0).collect::<Vec<_>>(), want, "{when}");
            assert!(g.contains(&(30_000, 30)), "{when}");
        };
        check_with_old(&db, &want, "older than the block");
        db.close(Close::Checkpoint);
        drop(db);
        let db = ooo_db(dir.path(), 0);
        check_with_old(&db, &want, "after a checkpoint");
        let more: Vec<(i64, HistSample)> = (150..210).map(at).collect();
        want.extend(more.iter().map(|s| s.0));
        want.sort_unstable();
        db.head().set_ooo_window(6 * H);
        send(&db, more);
        let cut = db.cut_blocks(2).expect("cut");
        assert!(
            cut.iter().any(|m| m.compaction.from_out_of_order),
            "{cut:?}"
        );
        check_with_old(&db, &want, "after the late histogram's cut");
        db.close(Close::WalOnly);
        drop(db);
        let db = ooo_db(dir.path(), 0);
        check_with_old(&db, &want, "after a replay");
        let merged = db.compact_blocks(3, &|| true).expect("compacts");
        assert!(merged.iter().any(|m| m.min_time == 0), "{merged:?}");
        check_with_old(&db, &want, "after compaction");
        db.close(Close::WalOnly);
    }

    /// A series that switches between floats and histograms in order
    /// (float, histogram, float) has a float chunk spanning a histogram:
    /// the cut writes them as runs of each kind. A histogram older than the
    /// newest block, without a window, is out of bounds, as a float is.
    #[test]
    fn floats_and_histograms_in_turn_are_cut_as_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        let labels = [("__name__", "mixed")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let mut c = AppendCounts::default();
        for i in 0..300i64 {
            let t = i * 60_000;
            let mut app = db.appender(i64::MAX);
            match i % 3 == 1 {
                true => app
                    .append_histograms(&labels, &raw, &[(t, hist(i as u64))], &mut c)
                    .expect("fits"),
                false => {
                    app.append_new(&labels, &raw, std::iter::once((t, i as f64)), &mut c)
                        .expect("fits");
                }
            }
            drop(app.commit());
        }
        db.head().log_and_wait();
        assert_eq!(c.appended, 300, "{c:?}");
        let before = everything(&db);
        assert_eq!((before[0].1.len(), before[0].2), (200, 100));
        let cut = db.cut_blocks(1).expect("cut");
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].num_samples, 120);
        assert_eq!(everything(&db), before);
        let mut app = db.appender(i64::MAX);
        let mut c = AppendCounts::default();
        app.append_histograms(&labels, &raw, &[(30_000, hist(1))], &mut c)
            .expect("fits");
        drop(app.commit());
        assert_eq!(c.rejected, [0, 0, 1], "out of bounds");
        db.close(Close::WalOnly);
    }

    /// A series whose in-order samples are all in blocks, then given a late
    /// one: it holds nothing else, and retention, reads and the next cut
    /// still see that sample.
    #[test]
    fn a_series_holding_only_late_samples_is_kept_read_and_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = ooo_db(dir.path(), 6 * H);
        let other = |db: &Db, samples: &[(i64, f64)]| {
            let labels = [("__name__", "up"), ("k", "1")];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            let mut app = db.appender(i64::MAX);
            let mut c = AppendCounts::default();
            app.append_new(&labels, &raw, samples.iter().copied(), &mut c)
                .expect("fits");
            drop(app.commit());
            db.head().log_and_wait();
            c
        };
        other(&db, &[(60_000, 1.0), (120_000, 2.0)]);
        let main: Vec<(i64, f64)> = (0..150).map(|i| (i * 120_000, i as f64)).collect();
        append_each(&db, &main);
        assert_eq!(db.cut_blocks(1).expect("cut").len(), 1);
        let c = other(&db, &[(90_000, 1.5)]);
        assert_eq!(c.out_of_order, 1);
        let of_other = |db: &Db| {
            everything(db)
                .into_iter()
                .find(|s| s.0.iter().any(|l| l.value == "1"))
                .map(|s| s.1)
                .unwrap_or_default()
        };
        let want = vec![(60_000, 1.0), (90_000, 1.5), (120_000, 2.0)];
        assert_eq!(of_other(&db), want);
        db.apply_retention(30_000);
        assert_eq!(of_other(&db), want, "after retention");
        let more: Vec<(i64, f64)> = (150..210).map(|i| (i * 120_000, i as f64)).collect();
        append_each(&db, &more);
        let cut = db.cut_blocks(2).expect("cut");
        assert!(
            cut.iter().any(|m| m.compaction.from_out_of_order),
            "{cut:?}"
        );
        assert_eq!(of_other(&db), want, "after the late sample's cut");
        db.close(Close::WalOnly);
        drop(db);
        let db = ooo_db(dir.path(), 0);
        assert_eq!(of_other(&db), want, "after a restart");
        db.close(Close::WalOnly);
    }

    /// A crash in the middle of a cut that hands late samples to blocks:
    /// the out-of-order block is on disk, the in-order one is not. The
    /// WAL's flushed record names both, so replay keeps the late samples;
    /// reads show each once, the next cut writes them again, and
    /// compaction leaves one copy.
    #[test]
    fn a_cut_cut_short_keeps_its_late_samples_and_compaction_leaves_one_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = ooo_db(dir.path(), 6 * H);
        let first: Vec<(i64, f64)> = (0..150).map(|i| (i * 120_000, i as f64)).collect();
        append_each(&db, &first);
        assert_eq!(db.cut_blocks(1).expect("cut").len(), 1);
        let late = [(90_000, 0.5), (150_000, 1.5)];
        let c = append_each(&db, &late);
        assert_eq!(c.out_of_order, 2);
        let more: Vec<(i64, f64)> = (150..210).map(|i| (i * 120_000, i as f64)).collect();
        append_each(&db, &more);
        let mut want: Vec<(i64, f64)> = first.iter().chain(&late).chain(&more).copied().collect();
        want.sort_by_key(|s| s.0);
        let got = |db: &Db| everything(db).pop().map(|s| s.1).unwrap_or_default();
        let cut = db.cut_blocks(2).expect("cut");
        assert_eq!(cut.len(), 2);
        db.close(Close::WalOnly);
        drop(db);
        // The crash came before the in-order block was in place.
        let in_order = cut
            .iter()
            .find(|m| !m.compaction.from_out_of_order)
            .expect("in-order block");
        std::fs::remove_dir_all(dir.path().join(in_order.ulid.to_string())).expect("remove");

        let db = ooo_db(dir.path(), 6 * H);
        assert_eq!(got(&db), want, "nothing lost, nothing read twice");
        let again = db.cut_blocks(3).expect("cut");
        assert_eq!(again.len(), 2, "the cut is done again: {again:?}");
        assert_eq!(got(&db), want);
        let merged = db.compact_blocks(4, &|| true).expect("compacts");
        let first_range: Vec<_> = merged.iter().filter(|m| m.min_time == 0).collect();
        assert_eq!(first_range.len(), 1, "{merged:?}");
        assert_eq!(first_range[0].num_samples, 60 + 2, "one copy of each");
        assert_eq!(got(&db), want, "after compaction");
        db.close(Close::WalOnly);
    }

    /// Chunks cut under a 2h range, kept through a checkpoint, then cut
    /// into blocks under a 1h range after a restart: chunks crossing a
    /// block's edge give it their samples in range, the rest follows in
    /// the next block, and nothing is lost or doubled.
    #[test]
    fn a_block_range_changed_across_a_restart_loses_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        fill(&db, 0, 5 * H);
        let before = everything(&db);
        db.close(Close::Checkpoint);
        drop(db);
        let db = Db::open(DbOptions {
            durability: Some(durability(dir.path())),
            head: crate::storage::HeadOptions {
                chunk_range_ms: H,
                ..Default::default()
            },
            ..DbOptions::default()
        })
        .expect("opens");
        let cut = db.cut_blocks(1).expect("cut");
        let ranges: Vec<(i64, i64)> = cut.iter().map(|m| (m.min_time, m.max_time)).collect();
        assert_eq!(ranges, [(0, H), (H, 2 * H), (2 * H, 3 * H), (3 * H, 4 * H)]);
        assert!(cut.iter().all(|m| m.num_samples == 21 * 60), "{cut:?}");
        assert_eq!(everything(&db), before);
        db.close(Close::WalOnly);
        drop(db);
        let db = open(dir.path());
        assert_eq!(everything(&db), before, "after a restart onto the blocks");
        db.close(Close::WalOnly);
    }

    /// As above, with the first 1h range deleted whole: its chunks cross
    /// into the next range, so the head still holds samples from there
    /// on, and the cut goes on past the range all the same.
    #[test]
    fn a_range_deleted_whole_across_a_changed_block_range_does_not_stall_the_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        fill(&db, 0, 5 * H);
        db.close(Close::Checkpoint);
        drop(db);
        let db = Db::open(DbOptions {
            durability: Some(durability(dir.path())),
            head: crate::storage::HeadOptions {
                chunk_range_ms: H,
                ..Default::default()
            },
            ..DbOptions::default()
        })
        .expect("opens");
        let all = vec![Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re")];
        assert_eq!(delete(&db, &[all], 0, H - 1), (0, 21));
        let want = everything(&db);
        let cut = db.cut_blocks(1).expect("cut");
        let ranges: Vec<(i64, i64)> = cut.iter().map(|m| (m.min_time, m.max_time)).collect();
        assert_eq!(ranges, [(H, 2 * H), (2 * H, 3 * H), (3 * H, 4 * H)]);
        assert_eq!(everything(&db), want);
    }

    #[test]
    fn the_oldest_range_goes_to_a_block_and_queries_see_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = open(dir.path());
        fill(&head, 0, 5 * H);
        let before = everything(&head);
        assert_eq!(before.len(), 21);
        assert_eq!(before[0].2, 300, "histograms held");
        let chunks_before = head.head_stats().chunks;

        let cut = head.cut_blocks(1).expect("cut");
        // 0..5h spans more than 3h: [0, 2h) is cut, then 2h..5h is not
        // more than 3h, so it stays.
        assert_eq!(cut.len(), 1);
        assert_eq!((cut[0].min_time, cut[0].max_time), (0, 2 * H));
        assert_eq!(cut[0].num_series, 21);
        assert_eq!(cut[0].num_samples, 21 * 120);
        assert_eq!(head.blocks().floor(), 2 * H);
        assert!(
            head.head_stats().chunks < chunks_before,
            "the head let go of chunks"
        );
        assert_eq!(head.head_stats().samples, 21 * 180);
        assert_eq!(
            everything(&head),
            before,
            "queries answer as before the cut"
        );

        // A query across the boundary sees each sample once.
        let m = Matcher::new(MatchOp::Equal, "k", "3").expect("m");
        let got = head
            .querier()
            .select_until(
                &[m],
                2 * H - 5 * 60_000,
                2 * H + 4 * 60_000,
                &Stop::default(),
            )
            .expect("no stop");
        assert_eq!(got.len(), 1);
        let ts: Vec<i64> = got[0]
            .samples(2 * H - 5 * 60_000, 2 * H + 4 * 60_000)
            .map(|s| s.0)
            .collect();
        assert_eq!(ts, (-5..=4).map(|i| 2 * H + i * 60_000).collect::<Vec<_>>());

        // Samples below the block's end are refused now.
        let mut c = AppendCounts::default();
        let labels = [("__name__", "late")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        head.head()
            .append_labels(&labels, &raw, [(H, 1.0)].into_iter(), i64::MAX, &mut c)
            .expect("fits");
        assert_eq!(c.appended, 0);

        // Labels and series answers see the block.
        let names = head
            .querier()
            .label_values("k", &[], 0, H, &Stop::default())
            .expect("no stop");
        assert_eq!(names.len(), 20);
        let names = head
            .querier()
            .label_names(&[], 0, H, &Stop::default())
            .expect("no stop");
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["__name__", "k"]);
        let m = Matcher::new(MatchOp::Equal, "__name__", "lat").expect("m");
        let values = head
            .querier()
            .label_values("__name__", std::slice::from_ref(&m), 0, H, &Stop::default())
            .expect("no stop");
        assert_eq!(values.into_iter().collect::<Vec<_>>(), ["lat"]);
        let sets = head
            .querier()
            .series_labels(&[], 0, H, &Stop::default())
            .expect("no stop");
        assert_eq!(sets.len(), 21);

        // Nothing more to cut.
        assert!(head.cut_blocks(2).expect("cut").is_empty());
        head.close(Close::WalOnly);
        drop(head);

        // A start after the cut but before any checkpoint: the WAL still
        // holds the block's samples; nothing is doubled.
        let head = open(dir.path());
        assert_eq!(head.blocks().stats().blocks, 1);
        assert_eq!(everything(&head), before);
        assert_eq!(
            head.head_stats().samples,
            21 * 180,
            "the head holds only what is newer than the block"
        );
        head.close(Close::WalOnly);
    }

    #[test]
    fn a_checkpoint_after_a_cut_covers_only_the_head_and_restarts_cleanly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = open(dir.path());
        fill(&head, 0, 8 * H);
        let before = everything(&head);
        let cut = head.cut_blocks(1).expect("cut");
        // 0..8h: [0,2h) and [2h,4h) go, leaving 4h..8h = 4h > 3h, so
        // [4h,6h) too; 6h..8h stays.
        assert_eq!(cut.len(), 3);
        let full = crate::storage::checkpoint::write(head.head(), dir.path()).expect("checkpoint");
        assert!(full.series <= 21);
        head.close(Close::WalOnly);
        drop(head);
        let head = open(dir.path());
        assert_eq!(everything(&head), before);
        assert_eq!(head.head_stats().samples, 21 * 120);
        head.close(Close::WalOnly);
    }

    #[test]
    fn an_unfinished_block_is_removed_and_damage_is_found_without_a_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = open(dir.path());
        fill(&head, 0, 5 * H);
        let before = everything(&head);
        let cut = head.cut_blocks(1).expect("cut");
        head.close(Close::WalOnly);
        drop(head);
        // A crash while writing: a .tmp directory with part of a block.
        let tmp = dir
            .path()
            .join(format!("{}.tmp", crate::storage::block::Ulid::new(5)));
        std::fs::create_dir_all(tmp.join("chunks")).expect("mkdir");
        let head = open(dir.path());
        assert!(!tmp.exists(), "the unfinished block is removed");
        assert_eq!(everything(&head), before);
        head.close(Close::WalOnly);
        drop(head);

        // A damaged series entry is found when a query reads it: the
        // answer leaves the block out and the error is counted, no panic.
        let name = cut[0].ulid.to_string();
        let index = dir.path().join(&name).join("index");
        let pristine = std::fs::read(&index).expect("index");
        let toc = pristine.len() - 52;
        let offset = |k: usize| {
            let at = toc + 8 * k;
            u64::from_be_bytes(pristine[at..at + 8].try_into().expect("8")) as usize
        };
        let mut b = pristine.clone();
        // Entries are 16-byte aligned; the section starts with padding.
        b[offset(1).div_ceil(16) * 16 + 3] ^= 0xff;
        std::fs::write(&index, &b).expect("write");
        let head = open(dir.path());
        assert_eq!(head.blocks().stats().blocks, 1);
        let got = everything(&head);
        assert!(got.iter().all(|s| s.1.iter().all(|&(t, _)| t >= 2 * H)));
        assert_eq!(head.blocks().stats().read_errors, 1);
        head.close(Close::WalOnly);
        drop(head);

        // A damaged symbol table is found at start: the block is moved
        // aside, and the start goes on without it.
        let symbols_at = offset(0);
        let mut b = pristine;
        b[symbols_at + 9] ^= 0xff;
        std::fs::write(&index, b).expect("write");
        let head = open(dir.path());
        assert!(dir.path().join(format!("{name}.damaged")).exists());
        assert_eq!(head.blocks().stats().damaged, 1);
        assert_eq!(head.blocks().stats().blocks, 0);
        // No checkpoint was written since the cut, so the WAL still
        // holds the block's samples, and without the block nothing
        // refuses them.
        assert_eq!(everything(&head), before, "the WAL still had it all");
        head.close(Close::WalOnly);
    }

    fn block_dirs(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read dir")
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| crate::storage::block::Ulid::parse(n).is_some())
            .collect();
        names.sort();
        names
    }

    /// `everything` with `[lo, hi]` of the series `k` (floats) or `lat`
    /// (histograms, when `k` is None) taken out.
    fn without(
        all: &Everything,
        k: Option<&str>,
        (lo, hi): (i64, i64),
        hists: usize,
    ) -> Everything {
        all.iter()
            .map(|(labels, floats, h)| {
                let this = labels.iter().any(|l| match k {
                    Some(k) => &*l.name == "k" && &*l.value == k,
                    None => &*l.value == "lat",
                });
                if !this {
                    return (labels.clone(), floats.clone(), *h);
                }
                let kept = floats
                    .iter()
                    .filter(|(t, _)| *t < lo || *t > hi)
                    .copied()
                    .collect();
                (
                    labels.clone(),
                    kept,
                    if k.is_none() { *h - hists } else { *h },
                )
            })
            .collect()
    }

    #[test]
    fn deleted_ranges_leave_every_read_survive_a_restart_and_compaction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        fill(&db, 0, 14 * H);
        assert_eq!(db.cut_blocks(1).expect("cut").len(), 6);
        let before = everything(&db);
        let k3 = vec![Matcher::new(MatchOp::Equal, "k", "3").expect("m")];
        let lat = vec![Matcher::new(MatchOp::Equal, "__name__", "lat").expect("m")];
        // Within one block, across two, and a histogram series' first
        // minutes: the rest of the data stays.
        let m = 60_000;
        assert_eq!(
            db.delete_in_blocks(std::slice::from_ref(&k3), 30 * m, 90 * m)
                .ok(),
            Some(1)
        );
        assert_eq!(
            db.delete_in_blocks(std::slice::from_ref(&k3), 3 * H + 30 * m, 4 * H + 29 * m)
                .ok(),
            Some(2)
        );
        assert_eq!(db.delete_in_blocks(&[lat], 0, 10 * m).ok(), Some(1));
        // Nothing in the head is a block's to delete.
        assert_eq!(db.delete_in_blocks(&[k3], 12 * H + m, 13 * H).ok(), Some(0));
        let want = without(
            &without(&before, Some("3"), (30 * m, 90 * m), 0),
            Some("3"),
            (3 * H + 30 * m, 4 * H + 29 * m),
            0,
        );
        let want = without(&want, None, (0, 10 * m), 11);
        assert_eq!(everything(&db), want);
        // The series API leaves out a series deleted whole from a block.
        let whole = vec![Matcher::new(MatchOp::Equal, "k", "5").expect("m")];
        assert_eq!(
            db.delete_in_blocks(std::slice::from_ref(&whole), 0, 2 * H - 1)
                .ok(),
            Some(1)
        );
        let sets = db
            .querier()
            .series_labels(&whole, 0, 2 * H - 1, &Stop::default())
            .expect("no stop");
        assert!(sets.is_empty(), "{sets:?}");
        let want = without(&want, Some("5"), (0, 2 * H - 1), 0);
        assert_eq!(everything(&db), want);
        // The blocks' files say so, in Prometheus' format.
        let counts: u64 = db
            .blocks()
            .read()
            .blocks()
            .iter()
            .map(|b| b.tombstone_count())
            .sum();
        assert_eq!(counts, 5);
        // Their meta.json files count them, as Prometheus' do.
        let on_disk: u64 = db
            .block_metas()
            .iter()
            .map(|m| {
                crate::storage::block::read_meta(&dir.path().join(m.ulid.to_string()))
                    .map_or(0, |m| m.num_tombstones)
            })
            .sum();
        assert_eq!(on_disk, 5);

        // A restart reads the tombstones back, and sets stats a crash left
        // behind the file.
        let metas = db.block_metas();
        drop(db);
        for m in &metas {
            crate::storage::block::set_tombstone_count(&dir.path().join(m.ulid.to_string()), 0)
                .expect("reset");
        }
        let db = open(dir.path());
        assert_eq!(everything(&db), want, "after a restart");
        let on_disk: u64 = metas
            .iter()
            .map(|m| {
                crate::storage::block::read_meta(&dir.path().join(m.ulid.to_string()))
                    .map_or(0, |m| m.num_tombstones)
            })
            .sum();
        assert_eq!(on_disk, 5, "the stats caught up at open");

        // Compaction writes its child without the deleted samples (and
        // with no tombstones of its own).
        let done = db.compact_blocks(2, &|| true).expect("compacts");
        assert_eq!(done.len(), 1);
        assert_eq!(everything(&db), want, "after compaction");
        let child = db
            .blocks()
            .read()
            .blocks()
            .iter()
            .find(|b| b.meta().ulid == done[0].ulid)
            .map(|b| b.tombstone_count());
        assert_eq!(child, Some(0));
        // 21 series × 360 minutes, less what was deleted in [0, 6h).
        let gone = 61 + 60 + 11 + 120;
        assert_eq!(done[0].num_samples, 21 * 360 - gone);
    }

    /// Deletes `[lo, hi]` of `selectors` from `db` and waits until the
    /// deletion is durable; (block series, head series) hit.
    fn delete(db: &Db, selectors: &[Vec<Matcher>], lo: i64, hi: i64) -> (u64, u64) {
        let d = db.delete(selectors, lo, hi).expect("deletes");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(d.commit.durable())
            .expect("durable");
        (d.block_series, d.head_series)
    }

    fn by(name: &str, value: &str) -> Vec<Matcher> {
        vec![Matcher::new(MatchOp::Equal, name, value).expect("matcher")]
    }

    #[test]
    fn head_deletions_leave_every_read_survive_restarts_and_reach_blocks_as_gaps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        fill(&db, 0, 3 * H);
        let before = everything(&db);
        let m = 60_000;
        // Part of one series, a histogram series' first minutes, and one
        // series whole (the default range of the API is all of time).
        assert_eq!(delete(&db, &[by("k", "3")], 30 * m, 90 * m), (0, 1));
        assert_eq!(
            delete(&db, &[by("__name__", "lat")], i64::MIN, 10 * m),
            (0, 1)
        );
        assert_eq!(delete(&db, &[by("k", "5")], i64::MIN, i64::MAX), (0, 1));
        // Nothing there: no range.
        assert_eq!(delete(&db, &[by("k", "7")], 5 * H, 6 * H), (0, 0));
        let mut want = without(&before, Some("3"), (30 * m, 90 * m), 0);
        want = without(&want, None, (0, 10 * m), 11);
        want = without(&want, Some("5"), (i64::MIN, i64::MAX), 0);
        want.retain(|(_, floats, hists)| !floats.is_empty() || *hists > 0);
        assert_eq!(want.len(), 20);
        assert_eq!(everything(&db), want);
        // The newest sample of a series is read apart: not a deleted one.
        let newest = db
            .querier()
            .select_newest_until(&by("k", "3"), 0, 90 * m, &Stop::default())
            .expect("no stop");
        assert_eq!(newest[0].last_sample(0, 90 * m).map(|s| s.0), Some(29 * m));
        // A series deleted whole is not listed; the others are.
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        let listed = |db: &Db| {
            db.querier()
                .series_labels(
                    std::slice::from_ref(&all),
                    i64::MIN,
                    i64::MAX,
                    &Stop::default(),
                )
                .expect("no stop")
                .len()
        };
        assert_eq!(listed(&db), 20);
        // Deleting again changes nothing.
        assert_eq!(delete(&db, &[by("k", "3")], 30 * m, 90 * m), (0, 1));
        assert_eq!(everything(&db), want);

        // The log brings the ranges back...
        db.close(Close::WalOnly);
        drop(db);
        let db = open(dir.path());
        assert_eq!(everything(&db), want, "after replaying the WAL");
        assert_eq!(listed(&db), 20);
        // ...and so does a checkpoint, once the segments it covers are gone.
        db.close(Close::Checkpoint);
        drop(db);
        let db = open(dir.path());
        assert_eq!(everything(&db), want, "after loading a checkpoint");

        // A cut writes its block without the deleted samples, and the head
        // lets go of the ranges that reach nothing it holds.
        fill(&db, 3 * H, 5 * H);
        let before = everything(&db);
        let cut = db.cut_blocks(1).expect("cut");
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].num_samples, 21 * 120 - 61 - 11 - 120);
        assert_eq!(everything(&db), before, "the same after the cut");
        assert_eq!(db.blocks().read().blocks()[0].tombstone_count(), 0);
        let left: Vec<u64> = db.head().deleted().iter().map(|(id, _)| id).collect();
        assert_eq!(left.len(), 1, "only k=5's range still reaches the head");
    }

    #[test]
    fn a_head_range_deleted_whole_goes_without_a_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        fill(&db, 0, 4 * H);
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        assert_eq!(delete(&db, &[vec![all]], 0, 2 * H - 1), (0, 21));
        // [0, 2h) holds nothing left: no block, and the next range is cut.
        fill(&db, 4 * H, 6 * H);
        let want = everything(&db);
        assert!(want
            .iter()
            .all(|(_, f, _)| f.first().is_none_or(|s| s.0 >= 2 * H)));
        let cut = db.cut_blocks(1).expect("cut");
        assert_eq!(
            cut.iter()
                .map(|b| (b.min_time, b.max_time))
                .collect::<Vec<_>>(),
            [(2 * H, 4 * H)]
        );
        assert_eq!(everything(&db), want);
        assert!(db.head().deleted().is_empty(), "no range reaches the head");
    }

    #[test]
    fn cleaning_tombstones_writes_blocks_again_and_one_deleted_whole_keeps_its_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open(dir.path());
        fill(&db, 0, 8 * H);
        assert_eq!(db.cut_blocks(1).expect("cut").len(), 3);
        let old: Vec<_> = db.block_metas().iter().map(|m| m.ulid).collect();
        let all = vec![Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re")];
        let m = 60_000;
        // All of [0, 2h), and part of one series in [2h, 4h).
        assert_eq!(
            db.delete_in_blocks(std::slice::from_ref(&all), 0, 2 * H - 1)
                .ok(),
            Some(21)
        );
        assert_eq!(
            db.delete_in_blocks(&[by("k", "3")], 2 * H + 30 * m, 3 * H)
                .ok(),
            Some(1)
        );
        let want = everything(&db);
        let cleaned = db.clean_tombstones(5).expect("cleans");
        assert_eq!(cleaned.len(), 2);
        // Nothing is left of the first: a child with no series keeps its
        // range and sources.
        assert_eq!((cleaned[0].0, cleaned[0].1.num_series), (old[0], 0));
        assert_eq!(cleaned[0].1.compaction.sources, [old[0]]);
        let child = cleaned[1].1.clone();
        assert_eq!(cleaned[1].0, old[1]);
        assert_eq!(child.num_samples, 21 * 120 - 31);
        assert_eq!(
            child
                .compaction
                .parents
                .iter()
                .map(|p| p.ulid)
                .collect::<Vec<_>>(),
            [old[1]]
        );
        assert_eq!(
            child.compaction.sources,
            [old[1]],
            "what it holds came from there"
        );
        assert_eq!(child.compaction.level, 1);
        assert_eq!(everything(&db), want, "the same answers");
        let on_disk = block_dirs(dir.path());
        assert_eq!(on_disk.len(), 3, "{on_disk:?}");
        assert!(!on_disk.contains(&old[0].to_string()) && !on_disk.contains(&old[1].to_string()));
        assert_eq!(db.blocks().read().floor(), 6 * H, "the floor stays");
        assert!(db
            .blocks()
            .read()
            .blocks()
            .iter()
            .all(|b| b.tombstone_count() == 0));
        // Nothing left to clean.
        assert!(db.clean_tombstones(6).expect("cleans").is_empty());

        // Compaction's plan writes again a block deleted whole: a block
        // with no series takes its place.
        assert_eq!(
            db.delete_in_blocks(std::slice::from_ref(&all), 2 * H, 4 * H - 1)
                .ok(),
            Some(21)
        );
        let want = everything(&db);
        let done = db.compact_blocks(7, &|| true).expect("compacts");
        assert!(done.iter().any(|m| m.num_series == 0), "{done:?}");
        let set = db.blocks().read();
        assert!(set.blocks().iter().all(|b| b.tombstone_count() == 0));
        drop(set);
        assert_eq!(everything(&db), want);
        db.close(Close::WalOnly);
        drop(db);
        let db = open(dir.path());
        assert_eq!(everything(&db), want, "after a restart");
    }

    #[test]
    fn compaction_merges_three_blocks_into_one_and_queries_see_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = open(dir.path());
        fill(&head, 0, 14 * H);
        let before = everything(&head);
        // 0..14h: [0,2h) … [10h,12h) are cut; 12h..14h stays.
        assert_eq!(head.cut_blocks(1).expect("cut").len(), 6);
        assert_eq!(block_dirs(dir.path()).len(), 6);
        let parents: Vec<_> = head.blocks().read().blocks()[..3]
            .iter()
            .map(|b| b.meta().ulid)
            .collect();

        let done = head.compact_blocks(2, &|| true).expect("compacts");
        // 2h, 6h and 18h ranges: [0,2h)+[2h,4h)+[4h,6h) fill 6h. The
        // newest block is left alone, and [6h,8h)+[8h,10h) neither fill
        // 6h nor end before it starts.
        assert_eq!(done.len(), 1);
        let m = &done[0];
        assert_eq!((m.min_time, m.max_time), (0, 6 * H));
        assert_eq!(m.compaction.level, 2);
        assert_eq!(m.compaction.sources, {
            let mut p = parents.clone();
            p.sort();
            p
        });
        assert_eq!(
            m.compaction
                .parents
                .iter()
                .map(|p| p.ulid)
                .collect::<Vec<_>>(),
            parents
        );
        assert_eq!((m.num_series, m.num_samples), (21, 21 * 360));
        let on_disk = block_dirs(dir.path());
        assert_eq!(on_disk.len(), 4, "the parents are gone: {on_disk:?}");
        assert!(parents.iter().all(|p| !on_disk.contains(&p.to_string())));
        assert_eq!(head.blocks().stats().compactions, 1);
        assert_eq!(everything(&head), before, "queries answer as before");
        let sets = head
            .querier()
            .series_labels(&[], 0, 6 * H, &Stop::default())
            .expect("no stop");
        assert_eq!(sets.len(), 21);
        // Nothing more to do.
        assert!(head.compact_blocks(3, &|| true).expect("ok").is_empty());
        head.close(Close::WalOnly);
        drop(head);

        let head = open(dir.path());
        assert_eq!(head.blocks().stats().blocks, 4);
        assert_eq!(everything(&head), before);
        head.close(Close::WalOnly);
    }

    #[test]
    fn start_times_go_to_blocks_and_through_compaction() {
        use crate::storage::starts::start_at;
        let dir = tempfile::tempdir().expect("tempdir");
        let open_st = |dir: &std::path::Path| {
            Db::open(DbOptions {
                durability: Some(durability(dir)),
                head: crate::storage::HeadOptions {
                    st_storage: true,
                    ooo_window_ms: 15 * H,
                    ..crate::storage::HeadOptions::default()
                },
                ..DbOptions::default()
            })
            .expect("opens")
        };
        let db = open_st(dir.path());
        // A counter that starts anew every 90 minutes, a sample a minute;
        // and `plain`, sent no start times.
        let mut c = AppendCounts::default();
        for (name, with_starts) in [("c_total", true), ("plain", false)] {
            let labels = [("__name__", name)];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            let st = |t: i64| (t / (90 * 60_000)) * 90 * 60_000 - 500;
            let samples: Vec<(i64, f64)> =
                (0..14 * H).step_by(60_000).map(|t| (t, t as f64)).collect();
            let mut app = db.appender(i64::MAX);
            let r = app
                .append_new(&labels, &raw, samples.iter().copied(), &mut c)
                .expect("fits");
            if with_starts {
                assert!(app.note_starts(r, samples.iter().map(|&(t, _)| (t, st(t)))));
            }
            drop(app.commit());
        }
        db.head().log_and_wait();
        let starts_of = |db: &Db| -> Vec<(i64, i64)> {
            let all = Matcher::new(MatchOp::Equal, "__name__", "c_total").expect("m");
            let s = db
                .querier()
                .select_until(&[all], i64::MIN, i64::MAX, &Stop::default())
                .expect("no stop");
            let runs = &s[0].starts;
            (0..14 * H)
                .step_by(7 * 60_000)
                .map(|t| (t, start_at(runs, t)))
                .collect()
        };
        let want: Vec<(i64, i64)> = (0..14 * H)
            .step_by(7 * 60_000)
            .map(|t| (t, (t / (90 * 60_000)) * 90 * 60_000 - 500))
            .collect();
        assert_eq!(starts_of(&db), want);
        // Six 2h blocks cut: the start-times files answer as the head did.
        assert_eq!(db.cut_blocks(1).expect("cut").len(), 6);
        assert_eq!(starts_of(&db), want);
        // Late samples between them over the first six hours, sent
        // without start times: out-of-order blocks of their own, which
        // must not take the in-order samples' start times away.
        let labels = [("__name__", "c_total")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let late: Vec<(i64, f64)> = (0..6 * H)
            .step_by(60_000)
            .map(|t| (t + 30_000, t as f64))
            .collect();
        let mut app = db.appender(i64::MAX);
        app.append_new(&labels, &raw, late.iter().copied(), &mut c)
            .expect("fits");
        app.note_starts_of(&raw, late.iter().map(|&(t, _)| (t, 0)));
        // And four more hours in order, for the head to cut again (late
        // samples go to blocks with a cut).
        let more: Vec<(i64, f64)> = (14 * H..18 * H)
            .step_by(60_000)
            .map(|t| (t, t as f64))
            .collect();
        app.append_new(&labels, &raw, more.iter().copied(), &mut c)
            .expect("fits");
        let st = |t: i64| (t / (90 * 60_000)) * 90 * 60_000 - 500;
        app.note_starts_of(&raw, more.iter().map(|&(t, _)| (t, st(t))));
        drop(app.commit());
        db.head().log_and_wait();
        let cut = db.cut_blocks(2).expect("cut");
        assert!(
            cut.iter()
                .filter(|m| m.compaction.from_out_of_order)
                .count()
                >= 3,
            "{cut:?}"
        );
        assert_eq!(starts_of(&db), want);
        let with_file = block_dirs(dir.path())
            .iter()
            .filter(|b| dir.path().join(b).join("start_times").exists())
            .count();
        assert!(with_file >= 6, "{with_file}");
        // Compacted (the late blocks with their ranges' in-order ones),
        // and reopened from disk.
        assert!(!db.compact_blocks(2, &|| true).expect("compacts").is_empty());
        assert_eq!(starts_of(&db), want);
        db.close(Close::WalOnly);
        drop(db);
        let db = open_st(dir.path());
        assert_eq!(starts_of(&db), want);
        // The series sent none has none.
        let all = Matcher::new(MatchOp::Equal, "__name__", "plain").expect("m");
        let s = db
            .querier()
            .select_until(&[all], i64::MIN, i64::MAX, &Stop::default())
            .expect("no stop");
        assert!(s[0].starts.is_empty());
        db.close(Close::WalOnly);
    }

    #[test]
    fn a_crash_before_the_parents_are_deleted_deletes_them_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = open(dir.path());
        fill(&head, 0, 10 * H);
        let before = everything(&head);
        assert_eq!(head.cut_blocks(1).expect("cut").len(), 4);
        let set = head.blocks().read();
        let parents: Vec<_> = set.blocks()[..3].to_vec();
        drop(set);
        // What compaction writes before it swaps the blocks and deletes
        // the parents.
        let opened: Vec<_> = parents
            .iter()
            .map(|b| crate::storage::blocks::Block::open(b.dir()).expect("opens"))
            .collect();
        let views: Vec<_> = opened.iter().map(|b| b.as_parent()).collect();
        let child =
            crate::storage::block::compact::compact(dir.path(), &views, 2, &|| true, &|_| {})
                .expect("written")
                .expect("not stopped");
        drop(views);
        drop(opened);
        head.close(Close::WalOnly);
        drop(head);
        assert_eq!(block_dirs(dir.path()).len(), 5, "child and parents");

        let head = open(dir.path());
        let on_disk = block_dirs(dir.path());
        assert_eq!(on_disk.len(), 2, "{on_disk:?}");
        assert!(on_disk.contains(&child.ulid.to_string()));
        assert_eq!(everything(&head), before, "nothing doubled, nothing lost");
        head.close(Close::WalOnly);
        drop(head);

        // A compaction stopped midway leaves no trace.
        let head = open(dir.path());
        let ok = head.compact_blocks(3, &|| false).expect("stopped");
        assert!(ok.is_empty());
        assert!(std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .all(|e| !e.file_name().to_string_lossy().ends_with(".tmp")));
        head.close(Close::WalOnly);
    }
}
