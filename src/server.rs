//! Builds the state, binds the listener and serves until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::config::Config;
use crate::storage::head::Head;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The write-ahead log could not be replayed or opened.
    #[error(transparent)]
    Wal(#[from] crate::wal::WalError),
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(#[from] std::io::Error),
}

/// A bound, not yet serving, Sluice.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    state: AppState,
}

impl Server {
    /// Validates `config`, builds the head and binds the listen address.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir).map_err(|source| ServerError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let head = match config.durability() {
            Some(d) => {
                let opts = config.head_options();
                tokio::task::spawn_blocking(move || Head::open(opts, &d))
                    .await
                    .map_err(|e| ServerError::Serve(std::io::Error::other(e)))??
            }
            None => Head::new(config.head_options()),
        };
        let head = Arc::new(head);
        let state = AppState::new(config, head);
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        Ok(Self { listener, state })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        Ok(self.listener.local_addr()?)
    }

    /// The shared state, e.g. to inspect the head in tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let addr = self.local_addr()?;
        tracing::info!(%addr, "listening");
        let head = self.state.head_arc();
        axum::serve(self.listener, api::router(self.state))
            .with_graceful_shutdown(shutdown)
            .await?;
        // Every request has been answered; make what they stored durable.
        tokio::task::spawn_blocking(move || head.close_wal())
            .await
            .map_err(std::io::Error::other)?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Runs Sluice with `config` until `shutdown` resolves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    Server::bind(&config).await?.serve(shutdown).await
}
