//! Spreading one query's per-series work over the machine's cores.
//!
//! A query runs on its own thread (see `api::slots`). Where it does the
//! same work for many series (selecting them, decoding their chunks, a
//! range function at every step), it may borrow helper threads for parts
//! of the series. Helpers come from one process-wide allowance,
//! `query-max-workers-per-query` less one (the query's own thread): a
//! query borrows only what is free and otherwise works alone, so one
//! query on an idle machine uses every core, and queries running at once
//! add at most that many helpers to their own threads between them.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Helpers the allowance holds: `query-max-workers-per-query` less one
/// (`usize::MAX`: not set, the machine's cores less one).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Helpers lent now.
static LENT: AtomicUsize = AtomicUsize::new(0);

/// Helper threads started so far.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// How many helper threads queries have started since the process began.
pub fn helpers_started() -> usize {
    STARTED.load(Ordering::Relaxed)
}

/// Sets how many threads one query may work on at most (its own
/// included): 0 means the machine's cores. Helpers lent when it changes
/// are given back as usual; none beyond the new allowance is lent after.
pub fn set_max_workers(workers: usize) {
    let workers = if workers == 0 { cores() } else { workers };
    LIMIT.store(workers.saturating_sub(1), Ordering::Relaxed);
}

/// The most threads one query may work on now (its own included).
pub(crate) fn max_threads() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        usize::MAX => cores(),
        n => n + 1,
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Helper threads borrowed from the allowance, given back when dropped.
struct Lease(usize);

impl Lease {
    /// Up to `want` helpers, as many as are free.
    fn take(want: usize) -> Self {
        if want == 0 {
            return Self(0);
        }
        let limit = match LIMIT.load(Ordering::Relaxed) {
            usize::MAX => cores().saturating_sub(1),
            n => n,
        };
        let mut lent = LENT.load(Ordering::Relaxed);
        loop {
            let got = limit.saturating_sub(lent).min(want);
            if got == 0 {
                return Self(0);
            }
            match LENT.compare_exchange_weak(lent, lent + got, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Self(got),
                Err(now) => lent = now,
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.0 > 0 {
            LENT.fetch_sub(self.0, Ordering::AcqRel);
        }
    }
}

/// The threads one piece of a query's work may run on: this one and the
/// helpers borrowed for it, given back when dropped.
pub(crate) struct Workers(Lease);

impl Workers {
    /// As many threads as `n` items allow at `min_part` items each (at
    /// least one: this thread), as far as helpers are free.
    pub(crate) fn for_items(n: usize, min_part: usize) -> Self {
        let most = n / min_part.max(1);
        Self(Lease::take(most.saturating_sub(1)))
    }

    /// How many threads: 1 when no helper was free.
    pub(crate) fn count(&self) -> usize {
        self.0 .0 + 1
    }

    /// `0..n` cut into [`Workers::count`] consecutive parts of near equal
    /// size.
    pub(crate) fn bounds(&self, n: usize) -> Vec<Range<usize>> {
        let count = self.count();
        (0..count)
            .map(|k| (n * k / count)..(n * (k + 1) / count))
            .collect()
    }

    /// Runs `f` on each item, the first on this thread and each other on
    /// a helper, and returns the results in the items' order. A helper
    /// that cannot be started leaves its item to this thread.
    pub(crate) fn run<I: Send, R: Send>(&self, items: Vec<I>, f: impl Fn(I) -> R + Sync) -> Vec<R> {
        let mut items = items.into_iter();
        let Some(first) = items.next() else {
            return Vec::new();
        };
        // Each helper's item waits in a cell, so that one whose thread
        // cannot be started is still there to run here.
        let cells: Vec<std::sync::Mutex<Option<I>>> =
            items.map(|i| std::sync::Mutex::new(Some(i))).collect();
        let take = |c: &std::sync::Mutex<Option<I>>| c.lock().ok().and_then(|mut c| c.take());
        let f = &f;
        std::thread::scope(|scope| {
            let helpers: Vec<_> = cells
                .iter()
                .map(|c| {
                    std::thread::Builder::new()
                        .name("sluice-query-worker".to_owned())
                        .spawn_scoped(scope, move || take(c).map(f))
                        .inspect(|_| {
                            STARTED.fetch_add(1, Ordering::Relaxed);
                        })
                        .ok()
                })
                .collect();
            let mut out = Vec::with_capacity(cells.len() + 1);
            out.push(f(first));
            for (h, c) in helpers.into_iter().zip(&cells) {
                let done = match h.map(|h| h.join()) {
                    Some(Ok(v)) => v,
                    Some(Err(panic)) => std::panic::resume_unwind(panic),
                    None => None,
                };
                match done {
                    Some(v) => out.push(v),
                    None => out.extend(take(c).map(f)),
                }
            }
            out
        })
    }

    /// Runs `f` on each item and returns the results in the items' order,
    /// each thread taking the next item left as it finishes one: work cut
    /// into more items than threads evens out items of unequal cost, where
    /// [`Workers::run`]'s one item per thread waits for the slowest. Each
    /// thread makes its scratch state with `init` once and lends it to
    /// every item it takes.
    pub(crate) fn run_queue<I: Send, S, R: Send>(
        &self,
        items: Vec<I>,
        init: impl Fn() -> S + Sync,
        f: impl Fn(&mut S, I) -> R + Sync,
    ) -> Vec<R> {
        let n = items.len();
        if self.count() == 1 || n < 2 {
            let mut state = init();
            return items.into_iter().map(|i| f(&mut state, i)).collect();
        }
        let queue = std::sync::Mutex::new(items.into_iter().enumerate());
        let next = || queue.lock().ok().and_then(|mut q| q.next());
        let (init, f) = (&init, &f);
        let done = self.run((0..self.count().min(n)).collect(), |_| {
            let mut state = init();
            let mut done = Vec::new();
            while let Some((i, item)) = next() {
                done.push((i, f(&mut state, item)));
            }
            done
        });
        let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
        for (i, r) in done.into_iter().flatten() {
            out[i] = Some(r);
        }
        // Every item was taken by one thread (a thread that could not be
        // started leaves its turn to this one, which empties the queue).
        out.into_iter().flatten().collect()
    }
}

/// Runs `f` over consecutive parts of `0..n` and returns their outputs
/// in order: at once on this thread and free helpers when `n` is at least
/// twice `min_part`, else `f(0..n)` here.
pub(crate) fn parts<T: Send>(
    n: usize,
    min_part: usize,
    f: impl Fn(Range<usize>) -> T + Sync,
) -> Vec<T> {
    let workers = Workers::for_items(n, min_part);
    if workers.count() == 1 {
        return vec![f(0..n)];
    }
    workers.run(workers.bounds(n), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_range_in_order() {
        for n in [0, 1, 7, 100, 1001] {
            for min in [1, 3, 50, 2000] {
                let got: Vec<usize> = parts(n, min, |r| r.collect::<Vec<_>>())
                    .into_iter()
                    .flatten()
                    .collect();
                assert_eq!(got, (0..n).collect::<Vec<_>>(), "n {n} min {min}");
            }
        }
    }

    #[test]
    fn a_queue_runs_every_item_once_and_answers_in_order() {
        for n in [0, 1, 2, 7, 100] {
            let workers = Workers::for_items(n, 1);
            let ran = AtomicUsize::new(0);
            let got = workers.run_queue((0..n).collect(), Vec::new, |seen, i| {
                // A thread's state is its own, kept from item to item.
                seen.push(i);
                assert!(seen.windows(2).all(|w| w[0] < w[1]));
                ran.fetch_add(1, Ordering::Relaxed);
                // Unequal costs, so that threads take turns out of order.
                if i % 3 == 0 {
                    std::thread::yield_now();
                }
                i * 2
            });
            assert_eq!(got, (0..n).map(|i| i * 2).collect::<Vec<_>>(), "n {n}");
            assert_eq!(ran.load(Ordering::Relaxed), n, "n {n}");
        }
    }
}
