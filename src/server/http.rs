//! The HTTP/1.1 accept loop, with the limits a public listener needs: a
//! cap on open connections, a deadline for each request's headers (which
//! also closes a keep-alive connection left idle that long), a bound on
//! header bytes, and a shutdown that waits for in-flight requests only up
//! to a deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

pub use crate::config::HttpLimits;

/// hyper's smallest read buffer.
const MIN_HEADER_BYTES: usize = 8192;

/// Serves `app` on `listener` until `shutdown` resolves; then stops
/// accepting, lets each connection finish its request in flight, and
/// returns once they have or `shutdown_timeout` has passed. Returns
/// whether every connection finished in time.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> bool {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (closing_tx, closing) = watch::channel(false);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BYTES))
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, don't spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let mut closing = closing.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = closing.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let all = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(limits.shutdown_timeout, permits.acquire_many(all)).await;
    drained.is_ok()
}
