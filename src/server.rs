//! Builds the state, binds the listener and serves until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub mod http;
pub mod relabel;
pub mod reload;
pub mod rules;
pub mod runtime;
pub mod tls;
pub mod web;

use crate::api::{self, AppState};
use crate::config::Config;
use crate::storage::{Clock, Close, Db};

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
    /// The web or runtime configuration file is missing or invalid.
    #[error("{0}")]
    WebConfig(String),
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(#[from] std::io::Error),
}

/// A bound, not yet serving, Sluice.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    state: AppState,
    http: http::HttpLimits,
    web: Option<web::WebConfigFile>,
    runtime: Option<runtime::RuntimeConfigFile>,
    relabel: Option<relabel::RelabelFile>,
    rules: Option<rules::RuleFiles>,
    tenant_rules: Option<rules::TenantRuleDirs>,
    alert_relabel: Option<rules::AlertRelabelFile>,
    hangup: reload::Hangup,
    /// Hangups since the server was bound, for the file watchers.
    hangups: watch::Receiver<u64>,
}

impl Server {
    /// Validates `config`, builds the head and binds the listen address.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        Self::bind_with_clock(config, Clock::system()).await
    }

    /// Like [`Server::bind`], reading time from `clock` (tests move it to
    /// exercise retention without waiting).
    pub async fn bind_with_clock(config: &Config, clock: Clock) -> Result<Self, ServerError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir).map_err(|source| ServerError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let opts = config.db_options();
        let db = tokio::task::spawn_blocking(move || Db::open(opts))
            .await
            .map_err(|e| ServerError::Serve(std::io::Error::other(e)))??;
        let state = AppState::with_clock(config, Arc::new(db), clock);
        if config.multitenancy {
            // Every tenant's acknowledged data is back before the first
            // request: each WAL is replayed now.
            let st = state.clone();
            let opened = tokio::task::spawn_blocking(move || st.tenants().open_existing())
                .await
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
            tracing::info!(tenants = opened + 1, "multitenancy: tenants opened");
        }
        let web = match config.web_config_file.as_os_str().is_empty() {
            true => None,
            false => {
                let (path, door, metrics) = (
                    config.web_config_file.clone(),
                    state.door(),
                    state.web_metrics(),
                );
                let loaded = tokio::task::spawn_blocking(move || {
                    web::WebConfigFile::load(&path, door, metrics)
                })
                .await
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
                Some(loaded.map_err(ServerError::WebConfig)?)
            }
        };
        let runtime = match config.runtime_config_file.as_os_str().is_empty() {
            true => None,
            false => {
                let (path, limits, metrics) = (
                    config.runtime_config_file.clone(),
                    state.tenant_limits(),
                    state.web_metrics().runtime_config,
                );
                // Logins, or client certificates checked against CAs.
                let logins = state.door().needs_login()
                    || web
                        .as_ref()
                        .and_then(web::WebConfigFile::tls)
                        .is_some_and(|t| t.current().verifies_clients);
                let loaded = tokio::task::spawn_blocking(move || {
                    runtime::RuntimeConfigFile::load(&path, limits, metrics, logins)
                })
                .await
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
                Some(loaded.map_err(ServerError::WebConfig)?)
            }
        };
        let relabel = match config.ingest_relabel_config.as_os_str().is_empty() {
            true => None,
            false => {
                let (path, limits, metrics) = (
                    config.ingest_relabel_config.clone(),
                    state.tenant_limits(),
                    state.web_metrics().ingest_relabel_config,
                );
                let loaded = tokio::task::spawn_blocking(move || {
                    relabel::RelabelFile::load(path, limits, metrics)
                })
                .await
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
                Some(loaded.map_err(ServerError::WebConfig)?)
            }
        };
        // In force before any rule is evaluated.
        let alert_relabel = match config.alert_relabel_file() {
            None => None,
            Some(path) => {
                let (path, cell) = (path.to_path_buf(), state.alert_relabel());
                let loaded =
                    tokio::task::spawn_blocking(move || rules::AlertRelabelFile::load(path, cell))
                        .await
                        .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
                Some(loaded.map_err(ServerError::WebConfig)?)
            }
        };
        let rules = match state.rules().configured() {
            false => None,
            true => {
                let (rules, patterns) = (state.rules(), config.rule_files.clone());
                let runtime = tokio::runtime::Handle::current();
                let loaded = tokio::task::spawn_blocking(move || {
                    rules::RuleFiles::start(rules, patterns, runtime)
                })
                .await
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
                Some(loaded.map_err(ServerError::WebConfig)?)
            }
        };
        let tenant_rules = match config.ruler_dir() {
            None => None,
            Some(dir) => {
                let base = crate::rules::RuleSettings {
                    alert_relabel: state.alert_relabel(),
                    ..config.rule_settings()
                };
                let (dir, state) = (dir.to_path_buf(), state.clone());
                let runtime = tokio::runtime::Handle::current();
                let started = tokio::task::spawn_blocking(move || {
                    rules::TenantRuleDirs::start(dir, base, state, runtime)
                })
                .await
                .map_err(|e| ServerError::Serve(std::io::Error::other(e)))?;
                Some(started)
            }
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let hangup = reload::Hangup::default();
        let mut http = config.http_limits();
        let cap = http::connection_cap(http.max_connections, http::raise_open_files_limit());
        if cap < http.max_connections {
            tracing::warn!(
                http_max_connections = http.max_connections,
                connections = cap,
                "the open-files limit leaves room for fewer connections than \
                 http-max-connections: at most this many are open at once"
            );
            http.max_connections = cap;
        }
        Ok(Self {
            listener,
            state,
            http,
            web,
            runtime,
            relabel,
            rules,
            tenant_rules,
            alert_relabel,
            hangups: hangup.subscribe(),
            hangup,
        })
    }

    /// What reloads the web and runtime configuration files (main
    /// notifies it on SIGHUP).
    pub fn hangup(&self) -> reload::Hangup {
        self.hangup.clone()
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        Ok(self.listener.local_addr()?)
    }

    /// The shared state, e.g. to inspect the database in tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then cancels running queries and
    /// lets in-flight requests finish, for up to `shutdown-timeout`.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let addr = self.local_addr()?;
        let tls = self.web.as_ref().and_then(web::WebConfigFile::tls);
        if tls.is_some() {
            tracing::info!("serving https (tls_server_config)");
        }
        tracing::info!(%addr, "listening");
        let db = self.state.db_arc();
        let (stop_tx, stop_rx) = watch::channel(false);
        let background =
            tokio::spawn(Arc::clone(&db).run_upkeep(self.state.clock(), stop_rx.clone()));
        self.state.tenants().start_upkeep(self.state.clock());
        // Tenants that hold nothing after retention are closed now and
        // then, until the server stops.
        let idle = {
            let (state, mut stopping) = (self.state.clone(), stop_rx.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stopping.changed() => return,
                        () = tokio::time::sleep(api::tenant::IDLE_CHECK) => {}
                    }
                    state.tenants().close_idle().await;
                }
            })
        };
        let tenants = self.state.clone();
        let watchers: Vec<_> = [
            self.web
                .map(|w| tokio::spawn(reload::watch(w, self.hangups.clone(), stop_rx.clone()))),
            self.runtime
                .map(|r| tokio::spawn(reload::watch(r, self.hangups.clone(), stop_rx.clone()))),
            self.relabel
                .map(|r| tokio::spawn(reload::watch(r, self.hangups.clone(), stop_rx.clone()))),
            self.rules
                .map(|r| tokio::spawn(reload::watch(r, self.hangups.clone(), stop_rx.clone()))),
            self.tenant_rules
                .map(|r| tokio::spawn(reload::watch(r, self.hangups.clone(), stop_rx.clone()))),
            self.alert_relabel
                .map(|r| tokio::spawn(reload::watch(r, self.hangups.clone(), stop_rx.clone()))),
        ]
        .into_iter()
        .flatten()
        .collect();
        let tls = tls.map(|config| http::TlsDoor {
            config,
            handshake_failures: self.state.web_metrics().handshake_failures,
        });
        let state = self.state.clone();
        let shutdown = async move {
            shutdown.await;
            state.close_reads();
        };
        let limits = self.http;
        let connections = self.state.connection_metrics();
        let door = self.state.door();
        let app = api::router(self.state);
        if !http::serve(self.listener, app, limits, connections, tls, door, shutdown).await {
            tracing::warn!(
                timeout = ?limits.shutdown_timeout,
                "requests still in flight at the shutdown timeout; stopping without them"
            );
        }
        // Requests are answered (or given up on: a write not yet in the WAL
        // was never acknowledged): stop background work, then close the
        // database (a last checkpoint so the next start is quick, and the
        // WAL flushed).
        let _ = stop_tx.send(true);
        let rules = tenants.rule_sets();
        let _ = tokio::task::spawn_blocking(move || rules.stop()).await;
        let _ = background.await;
        let _ = idle.await;
        tenants.tenants().close().await;
        for w in watchers {
            let _ = w.await;
        }
        tokio::task::spawn_blocking(move || db.close(Close::Checkpoint))
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
