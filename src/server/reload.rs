//! Reloading configuration files: on SIGHUP, and when a file changes (its
//! digest is looked at every [`POLL`]). A reload that fails keeps what is
//! in force; each file says why in the log and in its metric.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

/// How often the files are looked at for changes.
pub(super) const POLL: Duration = Duration::from_secs(2);

/// What SIGHUP tells every file watcher: a count of hangups, so each
/// watcher sees each one.
#[derive(Debug, Clone)]
pub struct Hangup(Arc<watch::Sender<u64>>);

impl Default for Hangup {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Hangup {
    /// Tells every watcher to reload.
    pub fn notify(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver of the hangups from now on.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// A configuration file that can be loaded again.
pub(super) trait Reloadable: Send + 'static {
    /// Whether the file (or those it names) differs from when it was last
    /// tried. Blocking.
    fn changed(&self) -> bool;
    /// Loads it again, puts it in force or keeps what is, and says so.
    /// Blocking.
    fn reload_and_report(&mut self, why: &'static str);
}

/// Reloads `file` on each hangup `hangups` sees (those since it was
/// subscribed, so none sent before the watcher starts is lost) and when
/// the file changes, until `stop`.
pub(super) async fn watch<R: Reloadable>(
    mut file: R,
    mut hangups: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            r = hangups.changed() => match r {
                Ok(()) => "SIGHUP",
                Err(_) => return,
            },
            _ = tick.tick() => "changed",
            _ = stop.wait_for(|s| *s) => return,
        };
        let done = tokio::task::spawn_blocking(move || {
            if why == "SIGHUP" || file.changed() {
                file.reload_and_report(why);
            }
            file
        })
        .await;
        match done {
            Ok(back) => file = back,
            Err(_) => return,
        }
    }
}

/// A digest of the files at `paths`, as they are now (a missing one as
/// empty).
pub(super) fn digest<'a>(paths: impl IntoIterator<Item = &'a Path>) -> [u8; 32] {
    let mut h = Sha256::new();
    for f in paths {
        let bytes = std::fs::read(f).unwrap_or_default();
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    h.finalize().into()
}
