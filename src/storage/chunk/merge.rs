//! Chunks of one series that overlap in time (an out-of-order block beside
//! the in-order block of its range, or the head's late samples beside a
//! block) merged into chunks that do not: each timestamp once, in time
//! order, as Prometheus' compacting chunk merger leaves them for reads and
//! for vertical compaction.

use super::{ChunkRef, XorAppender, XorIter};

/// Samples per chunk of merged runs: Prometheus' in-order target.
pub const MERGED_CHUNK_SAMPLES: usize = 120;

/// Encodes samples in time order as XOR chunks of at most `per_chunk`
/// samples each.
pub fn encode_xor(samples: &[(i64, f64)], per_chunk: usize) -> Vec<ChunkRef> {
    samples
        .chunks(per_chunk.max(1))
        .filter_map(|part| {
            let mut app = XorAppender::default();
            for &(t, v) in part {
                app.append(t, v);
            }
            Some(ChunkRef {
                mint: part.first()?.0,
                maxt: part.last()?.0,
                bytes: app.bytes().into(),
                last: part.last().copied(),
            })
        })
        .collect()
}

/// Whether `chunks` are in time order without overlapping: each starts
/// after the one before ends.
pub fn in_order(chunks: &[ChunkRef]) -> bool {
    chunks.windows(2).all(|w| w[1].mint > w[0].maxt)
}

/// `chunks` (each in time order, any order among themselves) as chunks in
/// time order that do not overlap. Chunks that overlap no other are kept
/// as they are; each group that overlaps is decoded and encoded again,
/// each timestamp once: where two chunks hold a time, the one given first
/// wins.
pub fn merge_overlapping(chunks: Vec<ChunkRef>) -> Vec<ChunkRef> {
    if in_order(&chunks) {
        return chunks;
    }
    // Stable: among chunks starting together, the one given first leads.
    let mut order: Vec<(usize, ChunkRef)> = chunks.into_iter().enumerate().collect();
    order.sort_by_key(|(_, c)| c.mint);
    let mut out = Vec::with_capacity(order.len());
    let mut group: Vec<(usize, ChunkRef)> = Vec::new();
    let mut group_maxt = i64::MIN;
    for (i, c) in order {
        if !group.is_empty() && c.mint > group_maxt {
            flush(&mut group, &mut out);
        }
        group_maxt = if group.is_empty() {
            c.maxt
        } else {
            group_maxt.max(c.maxt)
        };
        group.push((i, c));
    }
    flush(&mut group, &mut out);
    out
}

/// Moves one group of chunks (overlapping, sorted by `mint`) to `out`:
/// as it is when alone, merged when several.
fn flush(group: &mut Vec<(usize, ChunkRef)>, out: &mut Vec<ChunkRef>) {
    if group.len() == 1 {
        out.extend(group.drain(..).map(|(_, c)| c));
        return;
    }
    let mut samples: Vec<(i64, usize, f64)> = group
        .iter()
        .flat_map(|(i, c)| XorIter::new(&c.bytes).map(move |(t, v)| (t, *i, v)))
        .collect();
    group.clear();
    samples.sort_unstable_by_key(|&(t, i, _)| (t, i));
    samples.dedup_by_key(|&mut (t, _, _)| t);
    let merged: Vec<(i64, f64)> = samples.into_iter().map(|(t, _, v)| (t, v)).collect();
    out.extend(encode_xor(&merged, MERGED_CHUNK_SAMPLES));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples(chunks: &[ChunkRef]) -> Vec<(i64, f64)> {
        chunks.iter().flat_map(|c| XorIter::new(&c.bytes)).collect()
    }

    #[test]
    fn chunks_in_order_are_kept_as_they_are() {
        let a = encode_xor(&[(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)], 2);
        let kept = merge_overlapping(a.clone());
        assert!(kept.iter().zip(&a).all(|(x, y)| x.bytes.same(&y.bytes)));
    }

    #[test]
    fn overlapping_chunks_merge_and_the_first_given_wins_a_shared_time() {
        let block = encode_xor(&[(10, 1.0), (20, 2.0), (30, 3.0)], 120);
        let late = encode_xor(&[(5, 0.5), (20, 9.0), (25, 2.5)], 120);
        let after = encode_xor(&[(100, 10.0)], 120);
        let merged = merge_overlapping([block, late, after.clone()].concat());
        assert_eq!(
            samples(&merged),
            [
                (5, 0.5),
                (10, 1.0),
                (20, 2.0),
                (25, 2.5),
                (30, 3.0),
                (100, 10.0)
            ]
        );
        assert!(in_order(&merged));
        // The chunk that overlaps nothing is kept, not encoded again.
        assert!(merged[merged.len() - 1].bytes.same(&after[0].bytes));
    }

    proptest! {
        /// Any split of samples into chunks, in any order, with repeats,
        /// merges to the samples sorted, each time once.
        #[test]
        fn any_overlap_merges_to_the_sorted_distinct_samples(
            times in prop::collection::vec(0i64..500, 1..200),
            cuts in prop::collection::vec(1usize..40, 1..20),
            shuffle in any::<u64>(),
        ) {
            // Each part is a chunk of its own, in time order within.
            let mut parts: Vec<Vec<(i64, f64)>> = Vec::new();
            let mut rest = &times[..];
            for c in cuts.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (head, tail) = rest.split_at((*c).min(rest.len()));
                let mut p: Vec<(i64, f64)> = head.iter().map(|&t| (t, t as f64)).collect();
                p.sort_unstable_by_key(|s| s.0);
                p.dedup_by_key(|s| s.0);
                parts.push(p);
                rest = tail;
            }
            let n = parts.len();
            parts.rotate_left((shuffle as usize) % n);
            let chunks: Vec<ChunkRef> = parts.iter().flat_map(|p| encode_xor(p, 120)).collect();
            let merged = merge_overlapping(chunks);
            let mut want: Vec<i64> = times.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert!(in_order(&merged));
            prop_assert_eq!(samples(&merged).into_iter().map(|s| s.0).collect::<Vec<_>>(), want);
        }
    }
}
