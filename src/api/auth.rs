//! Logins and response headers at the door, from the web configuration
//! file: with `basic_auth_users` set, every endpoint but `/-/healthy` and
//! `/-/ready` needs one of those logins (401 with `WWW-Authenticate`
//! otherwise), and `http_server_config.headers` go on every response.
//!
//! A login is checked with bcrypt once; the verdict is cached under a
//! SHA-256 of user, hash and password (never the password itself), so a
//! sender's every request costs a hash and a lookup, not a bcrypt. An
//! unknown user is checked against a stand-in hash of the same cost, so
//! the time taken does not say which users exist. bcrypt runs on one
//! blocking thread at a time, with a bounded queue: a flood of bad logins
//! costs one core at most and is refused (503) past the queue.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};

use crate::config::web::{bcrypt_cost, WebConfig};

/// Verdicts kept; the oldest go first.
const CACHE_ENTRIES: usize = 4096;

/// Logins waiting for a bcrypt check beyond which more are refused (503).
const MAX_WAITING: usize = 256;

/// Who a request proved to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No login is configured, and no client certificate was checked.
    Anyone,
    /// A `basic_auth_users` user.
    User(Arc<str>),
    /// The subject common name of a client certificate checked against
    /// the client CAs (empty when it has none); `CN=<name>` in the
    /// runtime config's `identities`.
    Certificate(Arc<str>),
}

impl Identity {
    /// How `identities` names it, and how refusals name it.
    pub fn name(&self) -> String {
        match self {
            Identity::Anyone => String::new(),
            Identity::User(u) => u.to_string(),
            Identity::Certificate(cn) => format!("CN={cn}"),
        }
    }
}

/// The subject common name of the verified client certificate of a
/// request's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert(pub Arc<str>);

/// The login rules and headers in force; a reload swaps them.
#[derive(Debug, Default)]
pub struct Door {
    rules: RwLock<Arc<Rules>>,
}

impl Door {
    /// Puts the rules of `config` in force. Makes the stand-in hash for
    /// unknown users (one bcrypt): call it off the async threads.
    pub fn set(&self, config: &WebConfig) {
        *self.rules.write() = Arc::new(Rules::new(config));
    }

    pub(super) fn current(&self) -> Arc<Rules> {
        Arc::clone(&self.rules.read())
    }

    /// Whether logins are required now.
    pub fn needs_login(&self) -> bool {
        self.rules.read().needs_login()
    }

    /// Adds the configured `http_server_config.headers` to `headers`, for
    /// answers given before a request reaches the application.
    pub fn add_headers(&self, headers: &mut http::HeaderMap) {
        for (name, value) in &self.rules.read().headers {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// One configuration's logins and headers, with its verdict cache.
pub(super) struct Rules {
    users: HashMap<String, String>,
    /// What an unknown user's password is checked against.
    stand_in: String,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    cache: Mutex<Cache>,
    /// One bcrypt at a time.
    checking: Arc<tokio::sync::Semaphore>,
    waiting: AtomicUsize,
}

impl Default for Rules {
    fn default() -> Self {
        Self::new(&WebConfig::default())
    }
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("users", &self.users.len())
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// Verdicts by login. Right logins are kept apart from wrong ones, so a
/// flood of wrong passwords cannot push a sender's login out and send it
/// back to the bcrypt queue; only a right password makes a right entry,
/// so that side stays as small as the logins in use.
#[derive(Default)]
struct Cache {
    right: HashMap<[u8; 32], ()>,
    verdicts: HashMap<[u8; 32], bool>,
    order: VecDeque<[u8; 32]>,
}

impl Cache {
    fn get(&self, key: &[u8; 32]) -> Option<bool> {
        if self.right.contains_key(key) {
            return Some(true);
        }
        self.verdicts.get(key).copied()
    }

    fn put(&mut self, key: [u8; 32], ok: bool) {
        if ok {
            if self.right.len() >= CACHE_ENTRIES {
                self.right.clear();
            }
            self.right.insert(key, ());
            return;
        }
        if self.verdicts.insert(key, ok).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > CACHE_ENTRIES {
            if let Some(old) = self.order.pop_front() {
                self.verdicts.remove(&old);
            }
        }
    }
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Basic` header, or one that does not decode.
    Missing,
    /// An unknown user or a wrong password.
    Wrong,
    /// Too many logins are waiting for a check.
    Busy,
}

impl Refusal {
    /// The `reason` label of `sluice_http_unauthorized_requests_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Wrong => "wrong",
            Self::Busy => "busy",
        }
    }
}

impl Rules {
    fn new(config: &WebConfig) -> Self {
        let users: HashMap<String, String> = config
            .basic_auth_users
            .iter()
            .map(|(u, h)| (u.clone(), h.0.clone()))
            .collect();
        let costs: std::collections::BTreeSet<u32> =
            users.values().filter_map(|h| bcrypt_cost(h)).collect();
        if costs.len() > 1 {
            tracing::warn!(
                ?costs,
                "basic_auth_users' hashes have different bcrypt costs: how long a wrong password takes tells which user it was tried for"
            );
        }
        let cost = costs.last().copied().unwrap_or(bcrypt::DEFAULT_COST);
        let stand_in = if users.is_empty() {
            String::new()
        } else {
            // Any hash of this cost will do: no password is ever accepted
            // for it (an unknown user is refused whatever bcrypt says).
            bcrypt::hash_with_salt("sluice: no such user", cost, [0x5a; 16])
                .map(|h| h.format_for_version(bcrypt::Version::TwoY))
                .unwrap_or_default()
        };
        let headers = config
            .http_server_config
            .headers
            .iter()
            .filter_map(|(n, v)| {
                Some((
                    HeaderName::from_bytes(n.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        Self {
            users,
            stand_in,
            headers,
            cache: Mutex::default(),
            checking: Arc::new(tokio::sync::Semaphore::new(1)),
            waiting: AtomicUsize::new(0),
        }
    }

    pub(super) fn needs_login(&self) -> bool {
        !self.users.is_empty()
    }

    /// Checks the request's `Authorization` header.
    pub(super) async fn check(&self, auth: Option<&HeaderValue>) -> Result<Arc<str>, Refusal> {
        let (user, password) = auth.and_then(basic_credentials).ok_or(Refusal::Missing)?;
        let (known, hash) = match self.users.get(&user) {
            Some(h) => (true, h.as_str()),
            None => (false, self.stand_in.as_str()),
        };
        let key = cache_key(&user, hash, &password);
        let cached = self.cache.lock().get(&key);
        let matches = match cached {
            Some(ok) => ok,
            None => {
                let ok = self.bcrypt(password, hash).await?;
                self.cache.lock().put(key, ok);
                ok
            }
        };
        if known && matches {
            Ok(user.into())
        } else {
            Err(Refusal::Wrong)
        }
    }

    async fn bcrypt(&self, password: String, hash: &str) -> Result<bool, Refusal> {
        // Counted while waiting, and uncounted however the wait ends (a
        // client that hangs up drops this future mid-wait).
        let waiting = Waiting::enter(&self.waiting).ok_or(Refusal::Busy)?;
        let permit = Arc::clone(&self.checking)
            .acquire_owned()
            .await
            .map_err(|_| Refusal::Busy)?;
        drop(waiting);
        let hash = hash.to_owned();
        // The permit goes with the work: a bcrypt still running when its
        // request is dropped keeps the next one waiting.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            bcrypt::verify(password, &hash).unwrap_or(false)
        })
        .await
        .map_err(|_| Refusal::Busy)
    }
}

/// One login waiting for a bcrypt check, counted against [`MAX_WAITING`]
/// until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Option<Self> {
        if count.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING {
            count.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Self(count))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// User and password of an `Authorization: Basic` header.
pub fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn cache_key(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [user, hash, password] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// Whether `path` is answered without a login: the health checks.
pub(super) fn open_path(path: &str) -> bool {
    matches!(path, "/-/healthy" | "/-/ready")
}

/// The answer to a request refused at the door.
pub(super) fn refused(r: Refusal) -> Response {
    match r {
        Refusal::Missing | Refusal::Wrong => (
            StatusCode::UNAUTHORIZED,
            [
                (header::WWW_AUTHENTICATE, "Basic"),
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            ],
            "Unauthorized\n",
        )
            .into_response(),
        Refusal::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::RETRY_AFTER, "1"),
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            ],
            "too many logins waiting to be checked; retry later\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bcrypt of "secret" at cost 4 (cheap for tests).
    fn hash(password: &str) -> String {
        bcrypt::hash(password, 4).expect("hash")
    }

    fn rules(users: &[(&str, &str)]) -> Rules {
        let yaml = users
            .iter()
            .map(|(u, p)| format!("  {u}: '{}'\n", hash(p)))
            .collect::<String>();
        let config = WebConfig::parse(&format!("basic_auth_users:\n{yaml}")).expect("valid");
        Rules::new(&config)
    }

    fn basic(user: &str, password: &str) -> HeaderValue {
        let v = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {v}")).expect("header")
    }

    #[tokio::test]
    async fn the_right_login_passes_and_others_do_not() {
        let r = rules(&[("alice", "secret"), ("bob", "other")]);
        assert_eq!(
            r.check(Some(&basic("alice", "secret"))).await.as_deref(),
            Ok("alice")
        );
        assert_eq!(
            r.check(Some(&basic("alice", "other"))).await,
            Err(Refusal::Wrong)
        );
        assert_eq!(
            r.check(Some(&basic("carol", "secret"))).await,
            Err(Refusal::Wrong)
        );
        assert_eq!(r.check(None).await, Err(Refusal::Missing));
        let bearer = HeaderValue::from_static("Bearer abc");
        assert_eq!(r.check(Some(&bearer)).await, Err(Refusal::Missing));
        let junk = HeaderValue::from_static("Basic !!!");
        assert_eq!(r.check(Some(&junk)).await, Err(Refusal::Missing));
    }

    #[tokio::test]
    async fn verdicts_are_cached_without_the_password() {
        let r = rules(&[("alice", "secret")]);
        for _ in 0..3 {
            assert!(r.check(Some(&basic("alice", "secret"))).await.is_ok());
            assert!(r.check(Some(&basic("alice", "nope"))).await.is_err());
        }
        let cache = r.cache.lock();
        assert_eq!(cache.right.len(), 1, "one entry per distinct login");
        assert_eq!(cache.verdicts.len(), 1);
        assert!(cache.verdicts.values().all(|ok| !*ok));
    }

    #[tokio::test]
    async fn wrong_passwords_cannot_push_a_right_login_out() {
        let r = rules(&[("alice", "secret")]);
        assert!(r.check(Some(&basic("alice", "secret"))).await.is_ok());
        {
            let mut c = r.cache.lock();
            for i in 0..(CACHE_ENTRIES as u32 * 2) {
                let mut k = [0xffu8; 32];
                k[..4].copy_from_slice(&i.to_le_bytes());
                c.put(k, false);
            }
        }
        let key = cache_key("alice", &r.users["alice"], "secret");
        assert_eq!(r.cache.lock().get(&key), Some(true));
    }

    #[tokio::test]
    async fn a_login_dropped_while_waiting_leaves_no_count() {
        let r = Arc::new(rules(&[("alice", "secret")]));
        let held = Arc::clone(&r.checking)
            .acquire_owned()
            .await
            .expect("permit");
        let waiting = {
            let r = Arc::clone(&r);
            tokio::spawn(async move {
                r.bcrypt(
                    "x".into(),
                    "$2y$04$abcdefghijklmnopqrstuuNz5S8x1ZlXgkYEdvK.G8fQ1bWx9Q6pu",
                )
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(r.waiting.load(Ordering::Relaxed), 1);
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(
            r.waiting.load(Ordering::Relaxed),
            0,
            "an abandoned wait stays counted"
        );
        drop(held);
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut c = Cache::default();
        for i in 0..(CACHE_ENTRIES as u32 + 10) {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.to_le_bytes());
            c.put(k, false);
        }
        assert_eq!(c.verdicts.len(), CACHE_ENTRIES);
        assert_eq!(c.order.len(), CACHE_ENTRIES);
        assert_eq!(c.get(&[0u8; 32]), None, "the oldest went first");
    }

    #[test]
    fn an_unknown_user_costs_a_bcrypt_of_the_same_cost() {
        let r = rules(&[("alice", "secret")]);
        assert_eq!(bcrypt_cost(&r.stand_in), Some(4));
    }

    #[test]
    fn a_password_may_hold_colons() {
        let v = basic("alice", "a:b:c");
        assert_eq!(
            basic_credentials(&v),
            Some(("alice".to_owned(), "a:b:c".to_owned()))
        );
    }
}
