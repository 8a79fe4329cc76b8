//! Where read work runs: queries, and the series, label and federation
//! endpoints. Each runs on a thread of its own with a stack sized for the
//! deepest query the parser lets through, at most `query-max-concurrency`
//! at once; a request waits for a slot up to its timeout, and when the
//! timeout passes or the client goes away, the work is told to stop.
//!
//! The threads are kept between queries and end after [`IDLE_END`]
//! without work: a dashboard's queries would otherwise start and end a
//! thread each, and each start and end maps and unmaps stack, taking the
//! process's memory-map lock that the writers' page faults need.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{oneshot, watch, Semaphore};

use super::error::ApiError;
use super::prom::ErrorType;

/// Stack bytes per nesting level a query thread reserves: the deepest
/// shape (nested subqueries) needs about 6.3 KiB a level in an
/// unoptimised build and under 1 KiB in a release build.
const STACK_PER_LEVEL: usize = 16 << 10;

/// The least stack a query thread gets.
const MIN_STACK: usize = 8 << 20;

/// How long a query thread waits for work before it ends.
const IDLE_END: Duration = Duration::from_secs(60);

/// The bounded set of threads read work runs on.
#[derive(Debug)]
pub(crate) struct Slots {
    permits: Arc<Semaphore>,
    threads: Arc<Threads>,
    /// Turns true at shutdown: running work is told to stop.
    closing: watch::Sender<bool>,
    max: usize,
    stack_bytes: usize,
    running: Gauge,
    timed_out: Counter,
}

/// Set when the request that started the work is answered or dropped.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Slots {
    /// `max` slots, each thread with stack for queries `max_depth` deep;
    /// `running` and `timed_out` are the self-metrics it keeps.
    pub(crate) fn new(max: usize, max_depth: usize, running: Gauge, timed_out: Counter) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            threads: Arc::default(),
            closing: watch::Sender::new(false),
            max: max.max(1),
            stack_bytes: max_depth.saturating_mul(STACK_PER_LEVEL).max(MIN_STACK),
            running,
            timed_out,
        }
    }

    /// Tells running and waiting work to stop: the server is shutting down.
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Slots in use now.
    #[cfg(test)]
    fn busy(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    /// Runs `work` on a thread of its own, once a slot is free, and waits
    /// for it up to `timeout` in all. `work` gets a flag that turns true
    /// when its answer is no longer wanted (timeout, or the client gone);
    /// it keeps its slot until it returns. A panic in `work` is a 500.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        timeout: Duration,
        work: impl FnOnce(Arc<AtomicBool>) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let result = self.wait_and_run(timeout, work).await;
        if let Err(ApiError::Prom {
            kind: ErrorType::Timeout,
            ..
        }) = &result
        {
            self.timed_out.inc();
        }
        result
    }

    async fn wait_and_run<T: Send + 'static>(
        &self,
        timeout: Duration,
        work: impl FnOnce(Arc<AtomicBool>) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let permit = tokio::time::timeout_at(deadline, Arc::clone(&self.permits).acquire_owned())
            .await
            .map_err(|_| {
                timed_out(format!(
                    "query timed out waiting for one of the {} evaluation slots \
                     (query-max-concurrency)",
                    self.max
                ))
            })?
            .map_err(|_| ApiError::Prom {
                kind: ErrorType::Unavailable,
                message: "query canceled: the server is shutting down".to_owned(),
            })?;
        let flag = Arc::new(AtomicBool::new(false));
        let cancel = CancelOnDrop(Arc::clone(&flag));
        let (tx, rx) = oneshot::channel();
        let running = self.running.clone();
        self.threads.run(
            self.stack_bytes,
            Box::new(move || {
                running.inc();
                let result = panic::catch_unwind(AssertUnwindSafe(|| work(flag)));
                running.dec();
                // The answer and the slot are given back once the thread is
                // on the idle list again, so the query after it finds it.
                Box::new(move || {
                    drop(permit);
                    let _ = tx.send(result);
                })
            }),
        )?;
        let mut closing = self.closing.subscribe();
        let outcome = tokio::select! {
            o = tokio::time::timeout_at(deadline, rx) => o,
            _ = closing.wait_for(|c| *c) => {
                return Err(ApiError::Prom {
                    kind: ErrorType::Unavailable,
                    message: "query canceled: the server is shutting down".to_owned(),
                });
            }
        };
        drop(cancel);
        match outcome {
            Err(_) => Err({
                timed_out(format!(
                    "query timed out in query execution after {}",
                    humantime::format_duration(timeout)
                ))
            }),
            Ok(Err(_)) => Err(internal("the query thread ended without an answer".into())),
            Ok(Ok(Err(panicked))) => {
                let what = panicked
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panicked.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(internal(format!("query evaluation panicked: {what}")))
            }
            Ok(Ok(Ok(result))) => result,
        }
    }
}

/// One tenant's queries running at once, bounded by its
/// `max_query_concurrency`: a tenant past it waits for one of its own to
/// end, without taking a server slot meanwhile, so it cannot hold every
/// slot while other tenants wait.
#[derive(Debug, Default)]
pub(crate) struct QueryGate {
    running: parking_lot::Mutex<usize>,
    freed: tokio::sync::Notify,
}

/// A tenant's turn to run a query; its end frees it.
#[derive(Debug)]
pub(crate) struct Turn(Arc<QueryGate>);

impl Drop for Turn {
    fn drop(&mut self) {
        *self.0.running.lock() -= 1;
        self.0.freed.notify_one();
    }
}

impl QueryGate {
    /// Waits until fewer than `limit` of the tenant's queries run, up to
    /// `deadline`; the turn, or `None` when the deadline passed first.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        limit: usize,
        deadline: tokio::time::Instant,
    ) -> Option<Turn> {
        loop {
            // Registered before the count is read, so a query ending
            // between the two still wakes this one.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut running = self.running.lock();
                if *running < limit.max(1) {
                    *running += 1;
                    return Some(Turn(Arc::clone(self)));
                }
            }
            tokio::time::timeout_at(deadline, freed).await.ok()?;
        }
    }

    /// The tenant's queries running now.
    #[cfg(test)]
    fn running(&self) -> usize {
        *self.running.lock()
    }
}

/// The timeout of a query that waited for its tenant's turn in vain.
pub(crate) fn no_turn(tenant: &str, limit: u64) -> ApiError {
    timed_out(format!(
        "query timed out waiting for one of tenant {tenant}'s {limit} query slots \
         (max_query_concurrency)"
    ))
}

/// Work for a query thread; it catches its own panics, and returns what
/// is left to do once the thread is ready for the next job (handing over
/// the answer).
type Job = Box<dyn FnOnce() -> Finish + Send>;

/// The end of a [`Job`].
type Finish = Box<dyn FnOnce() + Send>;

/// Query threads kept between jobs: each idle one waits on its own
/// channel, newest last, so work goes to the thread that ran last and
/// the others end when they have waited [`IDLE_END`].
#[derive(Debug)]
struct Threads {
    idle: parking_lot::Mutex<Vec<(u64, mpsc::Sender<Job>)>>,
    /// How long an idle thread waits for work: [`IDLE_END`].
    idle_end: Duration,
    ids: AtomicU64,
    started: AtomicUsize,
}

impl Default for Threads {
    fn default() -> Self {
        Self {
            idle: parking_lot::Mutex::default(),
            idle_end: IDLE_END,
            ids: AtomicU64::default(),
            started: AtomicUsize::default(),
        }
    }
}

impl Threads {
    /// Runs `job` on an idle thread, or on a new one with `stack_bytes`
    /// of stack when none is idle.
    fn run(self: &Arc<Self>, stack_bytes: usize, job: Job) -> Result<(), ApiError> {
        let mut job = job;
        loop {
            let Some((_, idle)) = self.idle.lock().pop() else {
                break;
            };
            // A thread taken off the list waits for its job even when its
            // wait has just run out (see `serve`).
            match idle.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(back)) => job = back,
            }
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let threads = Arc::clone(self);
        std::thread::Builder::new()
            .name("sluice-query".to_owned())
            .stack_size(stack_bytes)
            .spawn(move || threads.serve(id, job))
            .map(|_| {
                self.started.fetch_add(1, Ordering::Relaxed);
            })
            .map_err(|e| internal(format!("cannot start a query thread: {e}")))
    }

    /// A query thread's life: its first job, then each one given to it
    /// while on the idle list, until it waits in vain.
    fn serve(&self, id: u64, first: Job) {
        crate::parallel::enter_query_class();
        let (tx, rx) = mpsc::channel::<Job>();
        let mut job = first;
        loop {
            let finish = job();
            self.idle.lock().push((id, tx.clone()));
            finish();
            job = match rx.recv_timeout(self.idle_end) {
                Ok(next) => next,
                Err(_) => {
                    let mut idle = self.idle.lock();
                    match idle.iter().position(|(i, _)| *i == id) {
                        Some(at) => {
                            idle.remove(at);
                            return;
                        }
                        // Taken off the list meanwhile: a job is on its way.
                        None => {
                            drop(idle);
                            match rx.recv() {
                                Ok(next) => next,
                                Err(_) => return,
                            }
                        }
                    }
                }
            };
        }
    }
}

/// The error of read work that stopped because its answer was no longer
/// wanted (the client was already told, or is gone).
impl From<crate::storage::Stopped> for ApiError {
    fn from(_: crate::storage::Stopped) -> Self {
        timed_out("query timed out in query execution".to_owned())
    }
}

fn timed_out(message: String) -> ApiError {
    ApiError::Prom {
        kind: ErrorType::Timeout,
        message,
    }
}

fn internal(message: String) -> ApiError {
    ApiError::Prom {
        kind: ErrorType::Internal,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_timed_out_run_is_told_to_stop_and_keeps_its_slot_until_it_does() {
        let slots = Slots::new(1, 10, Gauge::default(), Counter::default());
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let err = slots
            .run(Duration::from_millis(50), move |stop| {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = seen_tx.send(());
                Ok(())
            })
            .await
            .expect_err("times out");
        assert!(matches!(
            err,
            ApiError::Prom {
                kind: ErrorType::Timeout,
                ..
            }
        ));
        seen_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work saw the flag");
        // The slot comes back once the work has returned.
        let v = slots
            .run(Duration::from_secs(10), |_| Ok(7))
            .await
            .expect("runs");
        assert_eq!(v, 7);
    }

    #[tokio::test]
    async fn a_panic_is_an_internal_error_and_the_slot_is_freed() {
        let slots = Slots::new(1, 10, Gauge::default(), Counter::default());
        let err = slots
            .run(Duration::from_secs(10), |_| -> Result<(), ApiError> {
                panic!("boom")
            })
            .await
            .expect_err("panics");
        match err {
            ApiError::Prom {
                kind: ErrorType::Internal,
                message,
            } => assert!(message.contains("boom"), "{message}"),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(slots.busy(), 0);
        assert!(slots.run(Duration::from_secs(10), |_| Ok(())).await.is_ok());
    }

    #[tokio::test]
    async fn a_tenant_past_its_concurrency_waits_for_its_own_queries() {
        let gate = Arc::new(QueryGate::default());
        let soon = || tokio::time::Instant::now() + Duration::from_millis(50);
        let later = || tokio::time::Instant::now() + Duration::from_secs(30);
        let first = gate.enter(2, soon()).await.expect("first");
        let second = gate.enter(2, soon()).await.expect("second");
        assert!(
            gate.enter(2, soon()).await.is_none(),
            "a third waits in vain"
        );
        assert_eq!(gate.running(), 2);
        // A waiter gets its turn when one ends.
        let waiting = tokio::spawn({
            let gate = Arc::clone(&gate);
            async move { gate.enter(2, later()).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        drop(first);
        assert!(waiting.await.expect("joined").is_some());
        drop(second);
        assert_eq!(gate.running(), 0);
        // A lowered limit holds for new queries.
        let one = gate.enter(1, soon()).await.expect("one");
        assert!(gate.enter(1, soon()).await.is_none());
        drop(one);
        assert!(gate.enter(1, soon()).await.is_some());
    }

    #[test]
    fn threads_get_stack_for_the_deepest_query_allowed() {
        assert_eq!(
            Slots::new(4, 10, Gauge::default(), Counter::default()).stack_bytes,
            MIN_STACK
        );
        assert_eq!(
            Slots::new(4, 10_000, Gauge::default(), Counter::default()).stack_bytes,
            10_000 * STACK_PER_LEVEL
        );
    }

    #[tokio::test]
    async fn queries_one_after_another_run_on_one_kept_thread() {
        let slots = Slots::new(4, 10, Gauge::default(), Counter::default());
        let mut ran_on = std::collections::HashSet::new();
        for _ in 0..5 {
            let id = slots
                .run(Duration::from_secs(10), |_| Ok(std::thread::current().id()))
                .await
                .expect("runs");
            ran_on.insert(id);
            // The thread is back on the idle list before it answers.
            assert_eq!(slots.threads.idle.lock().len(), 1);
        }
        assert_eq!(ran_on.len(), 1);
        assert_eq!(slots.threads.started.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_idle_thread_ends_and_work_after_it_starts_another() {
        let threads = Arc::new(Threads {
            idle_end: Duration::from_millis(20),
            ..Threads::default()
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let job = |tx: std::sync::mpsc::Sender<std::thread::ThreadId>| -> Job {
            Box::new(move || {
                let _ = tx.send(std::thread::current().id());
                Box::new(|| {})
            })
        };
        threads.run(1 << 20, job(tx.clone())).expect("starts");
        let first = rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        // It goes on the idle list, and leaves it when its wait runs out.
        let wait_for = |len: usize| {
            let mut waited = 0;
            while threads.idle.lock().len() != len {
                std::thread::sleep(Duration::from_millis(1));
                waited += 1;
                assert!(waited < 20_000, "the idle list never held {len}");
            }
        };
        wait_for(1);
        wait_for(0);
        threads.run(1 << 20, job(tx)).expect("starts");
        let second = rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        assert_ne!(first, second);
        assert_eq!(threads.started.load(Ordering::Relaxed), 2);
    }
}
