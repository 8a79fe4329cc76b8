//! The HTTP/1.1 accept loop, with the limits a public listener needs:
//! - a cap on open connections, sized from the process' open-files limit;
//! - when the cap is reached, the connection that has waited longest
//!   without a request in flight (a half-sent head, an idle keep-alive)
//!   is closed to make room, so stalled clients cannot keep others out;
//! - a reserve of connections that only health checks, readiness and
//!   writes may use, so that queries in flight cannot fill the door;
//! - a deadline for each request's head (which also closes a keep-alive
//!   connection left idle that long) and a bound on its bytes, held at
//!   its exact number;
//! - a shutdown that closes every connection without a request in flight
//!   at once, then waits for those with one up to a deadline.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore};
use tower::Service as _;

pub use crate::config::HttpLimits;
use crate::telemetry::ConnectionMetrics;

/// hyper's smallest read buffer.
const MIN_HEADER_BYTES: usize = 8192;

/// What hyper may buffer beyond `http-max-header-bytes` before it refuses
/// a head itself: its own check is made per read, so it would cut off
/// somewhere past the limit. The exact check is [`head_bytes`].
const HEADER_SLACK: usize = 64 << 10;

/// Descriptors kept for everything but connections: the WAL, block
/// files, forwarding, the listener, standard streams. At least this many,
/// or a quarter of the limit when that is more.
const MIN_SPARE_FILES: u64 = 64;

/// Raises the soft limit on open files to the hard one, as Go's runtime
/// does for Prometheus (a distribution's default soft limit is often
/// 1024), and returns the soft limit now in force; `None` when it cannot
/// be read.
pub fn raise_open_files_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) => Some(soft),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open-files limit");
            None
        }
    }
}

/// The connection cap: `configured`, lowered so that connections leave a
/// quarter of `open_files` (at least 64 descriptors) to everything else.
pub fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let Some(files) = open_files else {
        return configured.max(1);
    };
    let spare = (files / 4).max(MIN_SPARE_FILES);
    let room = usize::try_from(files.saturating_sub(spare)).unwrap_or(usize::MAX);
    configured.min(room).max(1)
}

/// Connections only priority requests may hold with a request in flight:
/// a sixteenth of the cap, at least one.
fn reserve(cap: usize) -> usize {
    if cap <= 1 {
        0
    } else {
        (cap / 16).max(1)
    }
}

/// Requests that may use the reserve: liveness, readiness and writes.
fn is_priority(path: &str) -> bool {
    matches!(
        path,
        "/-/healthy" | "/-/ready" | "/api/v1/write" | "/v1/metrics" | "/api/v1/otlp/v1/metrics"
    )
}

/// The bytes of `req`'s head as a client writes it in the usual form
/// (`Name: value` lines): the request line, each header line and the
/// blank line. Whitespace hyper trimmed is not counted, so this is at
/// most the bytes received.
fn head_bytes<B>(req: &Request<B>) -> usize {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len());
    // "METHOD target HTTP/1.1\r\n"
    let line = req.method().as_str().len() + 1 + target + 1 + 8 + 2;
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum();
    line + headers + 2
}

/// The open connections and, among them, those without a request in
/// flight, oldest first: the ones shed when the cap is reached.
#[derive(Debug, Default)]
struct Table {
    state: Mutex<TableState>,
}

#[derive(Debug, Default)]
struct TableState {
    next_key: u64,
    waiting: BTreeMap<u64, Arc<Conn>>,
    /// Requests in flight that are not priority ones.
    ordinary_in_flight: usize,
}

/// One connection's place in the [`Table`].
#[derive(Debug, Default)]
struct Conn {
    /// Guarded by the table's lock.
    state: Mutex<ConnState>,
    /// Notified when the connection is to be closed to make room.
    shed: Notify,
}

#[derive(Debug, Default)]
struct ConnState {
    /// Its key in `waiting`, while it has no request in flight.
    waiting_key: Option<u64>,
    in_flight: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Table {
    /// Registers a new connection, waiting for its first request.
    fn open(self: &Arc<Self>) -> Arc<Conn> {
        let conn = Arc::new(Conn::default());
        let mut t = lock(&self.state);
        Self::wait(&mut t, &conn);
        conn
    }

    fn wait(t: &mut TableState, conn: &Arc<Conn>) {
        let key = t.next_key;
        t.next_key += 1;
        lock(&conn.state).waiting_key = Some(key);
        t.waiting.insert(key, Arc::clone(conn));
    }

    /// A request on `conn` begins; `false` (and nothing changed) when it
    /// is an ordinary request and only the reserve is left.
    fn begin(&self, conn: &Arc<Conn>, priority: bool, ordinary_cap: usize) -> bool {
        let mut t = lock(&self.state);
        if !priority {
            if t.ordinary_in_flight >= ordinary_cap {
                return false;
            }
            t.ordinary_in_flight += 1;
        }
        let mut c = lock(&conn.state);
        if let Some(key) = c.waiting_key.take() {
            t.waiting.remove(&key);
        }
        c.in_flight += 1;
        true
    }

    /// A request on `conn` has been answered (its body written or given
    /// up on); with none left in flight, the connection waits again.
    fn end(&self, conn: &Arc<Conn>, priority: bool) {
        let mut t = lock(&self.state);
        if !priority {
            t.ordinary_in_flight = t.ordinary_in_flight.saturating_sub(1);
        }
        let idle = {
            let mut c = lock(&conn.state);
            c.in_flight = c.in_flight.saturating_sub(1);
            c.in_flight == 0 && c.waiting_key.is_none()
        };
        if idle {
            Self::wait(&mut t, conn);
        }
    }

    /// `conn` is closed.
    fn close(&self, conn: &Arc<Conn>) {
        let mut t = lock(&self.state);
        if let Some(key) = lock(&conn.state).waiting_key.take() {
            t.waiting.remove(&key);
        }
    }

    /// Whether `conn` has a request in flight.
    fn busy(&self, conn: &Arc<Conn>) -> bool {
        let _t = lock(&self.state);
        let busy = lock(&conn.state).in_flight > 0;
        busy
    }

    /// Tells the connection that has waited longest without a request to
    /// close; `false` when every open connection has one in flight.
    fn shed_oldest(&self) -> bool {
        let mut t = lock(&self.state);
        let Some((_, conn)) = t.waiting.pop_first() else {
            return false;
        };
        lock(&conn.state).waiting_key = None;
        conn.shed.notify_one();
        true
    }
}

/// Holds a request's place until its answer has been written.
struct InFlight {
    table: Arc<Table>,
    conn: Arc<Conn>,
    priority: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.table.end(&self.conn, self.priority);
    }
}

/// An answer's body that releases the request's place when it is done.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The service one connection calls for each request: the router, with
/// the head-size check and the reserve in front of it.
#[derive(Clone)]
struct ConnService {
    app: Router,
    table: Arc<Table>,
    conn: Arc<Conn>,
    max_header_bytes: usize,
    ordinary_cap: usize,
    metrics: ConnectionMetrics,
    /// The name a verified client certificate proved, for every request
    /// on this connection.
    client: Option<crate::api::auth::ClientCert>,
    /// The configured response headers, for the answers given here.
    door: Arc<crate::api::auth::Door>,
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        if let Some(c) = &self.client {
            req.extensions_mut().insert(c.clone());
        }
        let priority = is_priority(req.uri().path());
        if !self.table.begin(&self.conn, priority, self.ordinary_cap) {
            self.metrics.reserve_refusals.inc();
            let mut r = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many requests in flight: the remaining connections are kept for \
                 health checks and writes (http-max-connections)\n",
            );
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            self.door.add_headers(r.headers_mut());
            return Box::pin(std::future::ready(Ok(r)));
        }
        let in_flight = InFlight {
            table: Arc::clone(&self.table),
            conn: Arc::clone(&self.conn),
            priority,
        };
        if head_bytes(&req) > self.max_header_bytes {
            let mut r = plain(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request head larger than http-max-header-bytes\n",
            );
            self.door.add_headers(r.headers_mut());
            return Box::pin(std::future::ready(Ok(r.map(|b| {
                Body::new(Tracked {
                    inner: b,
                    _in_flight: in_flight,
                })
            }))));
        }
        let mut app = self.app.clone();
        Box::pin(async move {
            let resp = match app.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok(resp.map(|b| {
                Body::new(Tracked {
                    inner: b,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// Serves one connection until it ends, is shed, or the server stops: at
/// shutdown a request in flight is finished and answered; a connection
/// without one (idle, or a head still arriving) is closed now.
async fn drive<I>(
    builder: &http1::Builder,
    io: I,
    service: ConnService,
    mut closing: watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = Arc::clone(&service.conn);
    let table = Arc::clone(&service.table);
    let mut connection = Box::pin(builder.serve_connection(io, service));
    let shutting_down = tokio::select! {
        _ = connection.as_mut() => false,
        () = conn.shed.notified() => false,
        _ = closing.wait_for(|c| *c) => true,
    };
    if shutting_down && table.busy(&conn) {
        connection.as_mut().graceful_shutdown();
        let _ = connection.as_mut().await;
    }
}

/// https at the door: the server configuration in force, and the count
/// of handshakes that failed.
#[derive(Clone)]
pub struct TlsDoor {
    /// The configuration new connections take.
    pub config: super::tls::TlsHandle,
    /// Handshakes that failed or timed out.
    pub handshake_failures: prometheus_client::metrics::counter::Counter,
}

/// Serves `app` on `listener` (over https with `tls`) until `shutdown`
/// resolves; then stops accepting, closes every connection without a
/// request in flight, lets the others finish theirs, and returns once they
/// have or `shutdown_timeout` has passed. Returns whether every connection
/// finished in time. `limits.max_connections` is used as given (see
/// [`connection_cap`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    metrics: ConnectionMetrics,
    tls: Option<TlsDoor>,
    door: Arc<crate::api::auth::Door>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> bool {
    let cap = limits.max_connections.max(1);
    metrics.limit.set(i64::try_from(cap).unwrap_or(i64::MAX));
    let ordinary_cap = cap - reserve(cap);
    let permits = Arc::new(Semaphore::new(cap));
    let table = Arc::new(Table::default());
    let (closing_tx, closing) = watch::channel(false);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(
            limits
                .max_header_bytes
                .saturating_add(HEADER_SLACK)
                .max(MIN_HEADER_BYTES),
        )
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // At the cap: make room by closing the connection that has
                // waited longest without a request, if there is one; its
                // permit returns once it has closed.
                if table.shed_oldest() {
                    metrics.shed.inc();
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    p = Arc::clone(&permits).acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                }
            }
        };
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors (something other than
                    // connections holds them) and the like: make room and
                    // wait, don't spin.
                    tracing::warn!(error = %e, "accept failed");
                    if table.shed_oldest() {
                        metrics.shed.inc();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let conn = table.open();
        let service = ConnService {
            app: app.clone(),
            table: Arc::clone(&table),
            conn: Arc::clone(&conn),
            max_header_bytes: limits.max_header_bytes,
            ordinary_cap,
            metrics: metrics.clone(),
            client: None,
            door: Arc::clone(&door),
        };
        let mut closing = closing.clone();
        let table = Arc::clone(&table);
        let open = metrics.open.clone();
        open.inc();
        let builder = builder.clone();
        let tls = tls.clone();
        let handshake_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => drive(&builder, TokioIo::new(stream), service, closing).await,
                Some(tls) => {
                    // The handshake has the head's deadline, and is given
                    // up when the connection is shed or the server stops.
                    let in_force = tls.config.current();
                    let acceptor = tokio_rustls::TlsAcceptor::from(in_force.config);
                    let accepted = tokio::select! {
                        r = tokio::time::timeout(handshake_timeout, acceptor.accept(stream)) => match r {
                            Ok(Ok(s)) => Some(s),
                            Ok(Err(e)) => {
                                tls.handshake_failures.inc();
                                tracing::debug!(error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tls.handshake_failures.inc();
                                None
                            }
                        },
                        () = conn.shed.notified() => None,
                        _ = closing.wait_for(|c| *c) => None,
                    };
                    if let Some(s) = accepted {
                        // Only a certificate checked against the client
                        // CAs names anyone; where they are checked, a
                        // connection without one (VerifyClientCertIfGiven)
                        // is named "", which no binding takes.
                        let client = in_force.verifies_clients.then(|| {
                            let name = s
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .and_then(super::tls::certificate_name)
                                .unwrap_or_default();
                            crate::api::auth::ClientCert(name.into())
                        });
                        let service = ConnService { client, ..service };
                        drive(&builder, TokioIo::new(s), service, closing).await;
                    }
                }
            }
            table.close(&conn);
            open.dec();
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(limits.shutdown_timeout, permits.acquire_many(all)).await;
    drained.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_other_files() {
        assert_eq!(connection_cap(4096, Some(1 << 20)), 4096);
        assert_eq!(connection_cap(4096, Some(256)), 192);
        assert_eq!(connection_cap(4096, Some(1024)), 768);
        assert_eq!(connection_cap(4096, Some(20)), 1);
        assert_eq!(connection_cap(100, None), 100);
        assert_eq!(reserve(4096), 256);
        assert_eq!(reserve(10), 1);
        assert_eq!(reserve(1), 0);
    }

    #[test]
    fn the_oldest_waiting_connection_is_shed_first() {
        let table = Arc::new(Table::default());
        let a = table.open();
        let b = table.open();
        let c = table.open();
        // `a` takes a request: it is no longer sheddable; `b` is oldest.
        assert!(table.begin(&a, true, 0));
        assert!(table.shed_oldest());
        assert!(lock(&b.state).waiting_key.is_none());
        assert!(lock(&c.state).waiting_key.is_some());
        // `a` finishes: it waits again, after `c`.
        table.end(&a, true);
        assert!(table.shed_oldest());
        assert!(lock(&c.state).waiting_key.is_none());
        assert!(table.shed_oldest());
        assert!(!table.shed_oldest(), "nothing left to shed");
    }

    #[test]
    fn ordinary_requests_leave_the_reserve() {
        let table = Arc::new(Table::default());
        let a = table.open();
        let b = table.open();
        assert!(table.begin(&a, false, 1));
        assert!(!table.begin(&b, false, 1), "the reserve is kept");
        assert!(table.begin(&b, true, 1), "a priority request takes it");
        table.end(&a, false);
        assert!(table.begin(&a, false, 1));
    }

    #[test]
    fn head_bytes_counts_the_usual_form() {
        let req = Request::get("/a?b=c")
            .header("host", "x")
            .body(())
            .expect("request");
        // "GET /a?b=c HTTP/1.1\r\n" + "host: x\r\n" + "\r\n"
        assert_eq!(head_bytes(&req), 21 + 9 + 2);
    }
}
