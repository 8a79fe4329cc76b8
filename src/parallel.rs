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
//!
//! The helpers are a pool of threads kept for the process, as many as the
//! allowance. Starting and ending a thread for each piece of work maps
//! and unmaps its stacks, which takes the process's memory-map lock that
//! the writers' page faults need; under a dashboard's queries that was
//! a hundred map changes a second.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Helpers the allowance holds: `query-max-workers-per-query` less one
/// (`usize::MAX`: not set, the machine's cores less one).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Helpers lent now.
static LENT: AtomicUsize = AtomicUsize::new(0);

/// Whether threads that run queries ask for the idle scheduling class.
static IDLE_CLASS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets whether threads that run queries (query threads and helpers)
/// start in the idle scheduling class (`--query-thread-priority`). Call it
/// before the first query: threads already started keep their class.
pub fn set_idle_class(idle: bool) {
    IDLE_CLASS.store(idle, Ordering::Relaxed);
}

/// Puts the calling thread, which is about to run queries, in the class
/// [`set_idle_class`] chose.
pub(crate) fn enter_query_class() {
    if IDLE_CLASS.load(Ordering::Relaxed) {
        enter_idle_class();
    }
}

/// Puts the calling thread in Linux's idle scheduling class
/// (`SCHED_IDLE`): it runs on what CPU time the other threads leave, so
/// queries take cores from ingest only while ingest does not want them.
/// Such a thread preempted while it holds a lock others need (a shard's,
/// for a batch of series; the block set's, for reading) runs again only
/// when a core has nothing else to run: a writer that waits for the lock
/// spins briefly and then sleeps, which frees its core, but other normal
/// work may take that core first. The measured effect on writes is in
/// BENCHMARKS.md ("Dashboard queries while ingest runs"); the class can
/// be turned off with `--query-thread-priority normal`. Elsewhere than
/// Linux, or when the kernel refuses, the thread stays as it is (said
/// once in the log).
fn enter_idle_class() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadSchedulePolicy,
        };
        let set = set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        );
        if let Err(e) = set {
            static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !TOLD.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = ?e, "cannot put query threads in the idle scheduling class; they share the cores with ingest evenly");
            }
        }
    }
}

/// Items run on a helper so far.
static HELPED: AtomicUsize = AtomicUsize::new(0);

/// The helper threads, as many as the allowance was when it was last
/// raised; built when first needed.
static POOL: parking_lot::Mutex<Option<Arc<rayon_core::ThreadPool>>> =
    parking_lot::Mutex::new(None);

/// How many items of queries' work helpers have run since the process
/// began.
pub fn helper_runs() -> usize {
    HELPED.load(Ordering::Relaxed)
}

/// A pool of at least `helpers` threads: the one there is, or a larger
/// one in its place (the old one's threads end once their work is done).
/// `None` when no thread can be started.
fn pool(helpers: usize) -> Option<Arc<rayon_core::ThreadPool>> {
    let mut pool = POOL.lock();
    if let Some(p) = pool.as_ref().filter(|p| p.current_num_threads() >= helpers) {
        return Some(Arc::clone(p));
    }
    let built = rayon_core::ThreadPoolBuilder::new()
        .num_threads(helpers)
        .thread_name(|_| "sluice-query-worker".to_owned())
        .start_handler(|_| enter_query_class())
        .build();
    match built {
        Ok(p) => {
            let p = Arc::new(p);
            *pool = Some(Arc::clone(&p));
            Some(p)
        }
        Err(e) => {
            static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !TOLD.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, "cannot start query helper threads; queries run on one thread");
            }
            None
        }
    }
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

/// Helpers the allowance holds now.
fn helper_limit() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        usize::MAX => cores().saturating_sub(1),
        n => n,
    }
}

impl Lease {
    /// Up to `want` helpers, as many as are free.
    fn take(want: usize) -> Self {
        if want == 0 {
            return Self(0);
        }
        let limit = helper_limit();
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
pub(crate) struct Workers {
    lease: Lease,
    /// Where the helpers run; `None` when none was borrowed.
    pool: Option<Arc<rayon_core::ThreadPool>>,
}

/// One item of [`Workers::run`], from waiting to done.
enum Cell<I, R> {
    Waiting(I),
    Taken,
    Done(R),
}

impl Workers {
    /// As many threads as `n` items allow at `min_part` items each (at
    /// least one: this thread), as far as helpers are free.
    pub(crate) fn for_items(n: usize, min_part: usize) -> Self {
        let most = n / min_part.max(1);
        let lease = Lease::take(most.saturating_sub(1));
        let pool = if lease.0 == 0 {
            None
        } else {
            pool(helper_limit().max(lease.0))
        };
        match pool {
            Some(pool) => Self {
                lease,
                pool: Some(pool),
            },
            None => Self {
                lease: Lease(0),
                pool: None,
            },
        }
    }

    /// How many threads: 1 when no helper was free.
    pub(crate) fn count(&self) -> usize {
        self.lease.0 + 1
    }

    /// `0..n` cut into [`Workers::count`] consecutive parts of near equal
    /// size.
    pub(crate) fn bounds(&self, n: usize) -> Vec<Range<usize>> {
        let count = self.count();
        (0..count)
            .map(|k| (n * k / count)..(n * (k + 1) / count))
            .collect()
    }

    /// Runs `f` on each item, the first on this thread and the others on
    /// helpers, and returns the results in the items' order. An item no
    /// helper has taken by the time this thread is done with the first is
    /// run here; this thread then still waits for each helper's turn to
    /// come (its job may only find the item gone), since the jobs borrow
    /// the items. A panic in `f` on a helper is raised again here.
    pub(crate) fn run<I: Send, R: Send>(&self, items: Vec<I>, f: impl Fn(I) -> R + Sync) -> Vec<R> {
        let mut items = items.into_iter();
        let Some(first) = items.next() else {
            return Vec::new();
        };
        let cells: Vec<parking_lot::Mutex<Cell<I, R>>> = items
            .map(|i| parking_lot::Mutex::new(Cell::Waiting(i)))
            .collect();
        let take = |c: &parking_lot::Mutex<Cell<I, R>>| {
            let mut c = c.lock();
            if !matches!(*c, Cell::Waiting(_)) {
                return None;
            }
            match std::mem::replace(&mut *c, Cell::Taken) {
                Cell::Waiting(i) => Some(i),
                _ => None,
            }
        };
        let run_here = || {
            let mut out = Vec::with_capacity(cells.len() + 1);
            out.push(f(first));
            for c in &cells {
                if let Some(i) = take(c) {
                    let r = f(i);
                    *c.lock() = Cell::Done(r);
                }
            }
            out
        };
        let mut out = match &self.pool {
            Some(pool) if !cells.is_empty() => pool.in_place_scope(|scope| {
                for c in &cells {
                    let (take, f) = (&take, &f);
                    scope.spawn(move |_| {
                        if let Some(i) = take(c) {
                            HELPED.fetch_add(1, Ordering::Relaxed);
                            let r = f(i);
                            *c.lock() = Cell::Done(r);
                        }
                    });
                }
                run_here()
            }),
            _ => run_here(),
        };
        // Every helper's job has ended (the scope waits for them), so each
        // item is done: here or there.
        out.extend(cells.into_iter().map(|c| match c.into_inner() {
            Cell::Done(r) => r,
            // A job that panicked leaves its item taken, but the scope
            // has raised the panic here before this line.
            Cell::Waiting(_) | Cell::Taken => {
                unreachable!("every item is run before the scope ends")
            }
        }));
        out
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
        // Every item was taken by one thread (one whose turn came late
        // finds the queue empty; this one empties it at the latest).
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

    #[test]
    fn helpers_are_kept_from_one_piece_of_work_to_the_next() {
        let here = std::thread::current().id();
        let mut helpers = std::collections::HashSet::new();
        for _ in 0..20 {
            let workers = Workers::for_items(64, 1);
            let ran = workers.run((0..workers.count()).collect(), |i| {
                // Long enough that helpers take their items.
                std::thread::sleep(std::time::Duration::from_millis(1));
                (i, std::thread::current().id())
            });
            assert_eq!(
                ran.iter().map(|r| r.0).collect::<Vec<_>>(),
                (0..workers.count()).collect::<Vec<_>>()
            );
            helpers.extend(ran.into_iter().map(|r| r.1).filter(|t| *t != here));
        }
        // Threads started per piece of work would show up as 20 or more.
        let pool = POOL.lock().as_ref().map_or(0, |p| p.current_num_threads());
        assert!(
            helpers.len() <= pool,
            "{} helpers, pool of {pool}",
            helpers.len()
        );
    }

    #[test]
    fn a_panic_on_a_helper_reaches_the_caller() {
        let workers = Workers::for_items(64, 1);
        let n = workers.count();
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            workers.run((0..n.max(2)).collect(), |i| {
                if i == 1 {
                    panic!("item one");
                }
                i
            })
        }));
        assert!(got.is_err());
        drop(workers);
        // The allowance is whole again and the pool still works.
        let after = Workers::for_items(64, 1);
        let ran = after.run((0..after.count()).collect(), |i| i + 1);
        assert_eq!(ran, (1..=after.count()).collect::<Vec<_>>());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_can_enter_the_idle_class() {
        use thread_priority::unix::{
            thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy,
        };
        let class = std::thread::spawn(|| {
            let before = thread_schedule_policy().expect("policy");
            enter_idle_class();
            (before, thread_schedule_policy().expect("policy"))
        })
        .join()
        .expect("joined");
        assert_eq!(
            class,
            (
                ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other),
                ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
            )
        );
    }
}
