//! Alerts to Alertmanager, as Prometheus' notifier sends them: a bounded
//! queue (the oldest dropped when it is full), batches of at most 256
//! posted as JSON to each Alertmanager's `/api/v2/alerts` within 10 s,
//! with the external labels an alert lacks added, over http or https (a
//! CA, a client certificate, a server name, as Prometheus' `tls_config`)
//! with basic auth when asked. No retry: an alert still firing is sent
//! again after the resend delay, and one not delivered anywhere is
//! counted dropped.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use super::alerting::Outgoing;

/// Alerts the queue holds at most (Prometheus'
/// `--alertmanager.notification-queue-capacity`).
pub const QUEUE_CAPACITY: usize = 10_000;
/// Alerts in one request at most.
pub const MAX_BATCH: usize = 256;
/// How long one Alertmanager may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What the notifier did, for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct NotifierFigures {
    /// Per Alertmanager (its URL): alerts sent (delivered or not), and
    /// requests that failed.
    pub per_alertmanager: Vec<(String, u64, u64)>,
    /// Alerts dropped: the queue was full, or no Alertmanager took them.
    pub dropped: u64,
    /// Alerts waiting.
    pub queued: u64,
}

/// Prometheus' `alert_relabel_configs` in force, shared by every
/// notifier and put in force anew when their file is read again.
pub type AlertRelabel = Arc<parking_lot::RwLock<Arc<crate::relabel::Relabeler>>>;

/// How notifications reach the Alertmanagers: TLS for https URLs, and a
/// login (user, and the file holding the password, read at each send).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Transport {
    /// TLS settings for https Alertmanagers.
    pub tls: crate::forward::TlsConfig,
    /// Basic auth: the user and the password's file.
    pub basic_auth: Option<(String, std::path::PathBuf)>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls)
            .field("basic_auth_user", &self.basic_auth.as_ref().map(|(u, _)| u))
            .finish()
    }
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

impl Transport {
    /// A client for http and https Alertmanagers (with `https` false, for
    /// plain http alone: no trust store is read).
    fn client(&self, https: bool) -> Result<HttpsClient, String> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(TIMEOUT));
        let config = match https {
            true => self.tls.client_config()?,
            false => crate::forward::TlsConfig::plain_http()?,
        };
        let tls = HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http();
        let tls = match &self.tls.server_name {
            Some(name) => {
                let name = rustls_pki_types::ServerName::try_from(name.clone())
                    .map_err(|e| format!("tls server-name {name:?}: {e}"))?;
                tls.with_server_name_resolver(FixedServerNameResolver::new(name))
            }
            None => tls,
        };
        Ok(Client::builder(TokioExecutor::new()).build(tls.enable_http1().wrap_connector(http)))
    }

    /// A digest of the TLS files as they are now (a missing one as
    /// empty), to see when they change.
    fn tls_digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for f in [&self.tls.ca_file, &self.tls.cert_file, &self.tls.key_file]
            .into_iter()
            .flatten()
        {
            let bytes = std::fs::read(f).unwrap_or_default();
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(&bytes);
        }
        h.finalize().into()
    }

    /// The Authorization header's value, the password read now.
    fn authorization(&self) -> Result<Option<http::HeaderValue>, String> {
        use base64::Engine as _;
        let Some((user, file)) = &self.basic_auth else {
            return Ok(None);
        };
        let password = std::fs::read_to_string(file)
            .map_err(|e| format!("basic auth password file {}: {e}", file.display()))?;
        let token =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{}", password.trim()));
        let mut value =
            http::HeaderValue::from_str(&format!("Basic {token}")).map_err(|e| e.to_string())?;
        value.set_sensitive(true);
        Ok(Some(value))
    }
}

/// The queue and the Alertmanagers it sends to.
#[derive(Debug)]
pub struct Notifier {
    /// Each Alertmanager's alerts endpoint.
    endpoints: Vec<String>,
    external_labels: BTreeMap<String, String>,
    /// A header every request carries: the tenant the alerts are of.
    header: Option<(http::HeaderName, http::HeaderValue)>,
    /// TLS and login.
    transport: Transport,
    /// What alerts pass through before they are queued.
    relabel: AlertRelabel,
    queue: Mutex<VecDeque<Outgoing>>,
    more: Notify,
    /// Sent and failed per endpoint, and dropped.
    counts: Mutex<(Vec<(u64, u64)>, u64)>,
}

/// An Alertmanager URL's alerts endpoint: `<url>/api/v2/alerts`.
pub fn endpoint(url: &str) -> String {
    format!("{}/api/v2/alerts", url.trim_end_matches('/'))
}

/// A time as Alertmanager's API takes it: ms precision, UTC.
fn api_time(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// The JSON body of one batch (Alertmanager's `PostableAlerts`).
pub fn body(alerts: &[Outgoing]) -> String {
    let list: Vec<serde_json::Value> = alerts
        .iter()
        .map(|a| {
            let mut o = serde_json::Map::new();
            if !a.annotations.is_empty() {
                o.insert("annotations".into(), serde_json::json!(a.annotations));
            }
            o.insert("endsAt".into(), serde_json::json!(api_time(a.ends_at_ms)));
            o.insert(
                "startsAt".into(),
                serde_json::json!(api_time(a.starts_at_ms)),
            );
            o.insert("generatorURL".into(), serde_json::json!(a.generator_url));
            o.insert("labels".into(), serde_json::json!(a.labels));
            serde_json::Value::Object(o)
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

impl Notifier {
    /// A notifier to the Alertmanagers at `urls` by `transport`, adding
    /// `external_labels` to the alerts that lack them and then passing
    /// them through `relabel` (as Prometheus' notifier), and `header` to
    /// every request.
    pub fn new(
        urls: &[String],
        external_labels: BTreeMap<String, String>,
        header: Option<(http::HeaderName, http::HeaderValue)>,
        (transport, relabel): (Transport, AlertRelabel),
    ) -> Self {
        Self {
            endpoints: urls.iter().map(|u| endpoint(u)).collect(),
            external_labels,
            header,
            transport,
            relabel,
            queue: Mutex::new(VecDeque::new()),
            more: Notify::new(),
            counts: Mutex::new((vec![(0, 0); urls.len()], 0)),
        }
    }

    /// Whether there is anywhere to send.
    pub fn configured(&self) -> bool {
        !self.endpoints.is_empty()
    }

    /// Queues `alerts`, the oldest queued dropped past the capacity.
    pub fn send(&self, alerts: Vec<Outgoing>) {
        if alerts.is_empty() || !self.configured() {
            return;
        }
        let mut dropped = 0u64;
        let relabel = Arc::clone(&self.relabel.read());
        // Relabelled before the queue is locked. One the relabelling
        // drops is not sent, as in Prometheus; nor is one it leaves with
        // no label (which Prometheus sends, for Alertmanager to refuse).
        let kept: Vec<Outgoing> = alerts
            .into_iter()
            .filter_map(|mut a| {
                for (k, v) in &self.external_labels {
                    a.labels.entry(k.clone()).or_insert_with(|| v.clone());
                }
                (relabel.apply(&mut a.labels) && !a.labels.is_empty()).then_some(a)
            })
            .collect();
        {
            let mut q = self.queue.lock();
            q.extend(kept);
            while q.len() > QUEUE_CAPACITY {
                q.pop_front();
                dropped += 1;
            }
        }
        if dropped > 0 {
            tracing::warn!(dropped, "alert notification queue full, dropping alerts");
            self.counts.lock().1 += dropped;
        }
        self.more.notify_one();
    }

    /// What it did so far.
    pub fn figures(&self) -> NotifierFigures {
        let counts = self.counts.lock();
        NotifierFigures {
            per_alertmanager: self
                .endpoints
                .iter()
                .zip(counts.0.iter())
                .map(|(e, &(sent, failed))| (e.clone(), sent, failed))
                .collect(),
            dropped: counts.1,
            queued: self.queue.lock().len() as u64,
        }
    }

    /// Sends batches as they come, until `stop` (what is queued then is
    /// sent first).
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let https = self.endpoints.iter().any(|e| e.starts_with("https://"));
        // The client, and the TLS files' digest it was made from: made
        // again when they change (a certificate rotated) or when it could
        // not be made, off the runtime's threads.
        let mut client: Option<HttpsClient> = None;
        let mut made_from: Option<[u8; 32]> = None;
        loop {
            let batch: Vec<Outgoing> = {
                let mut q = self.queue.lock();
                let n = q.len().min(MAX_BATCH);
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                if *stop.borrow() {
                    return;
                }
                tokio::select! {
                    () = self.more.notified() => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            if https || client.is_none() {
                let transport = self.transport.clone();
                let known = made_from;
                let fresh = tokio::task::spawn_blocking(move || {
                    let digest = transport.tls_digest();
                    if known == Some(digest) {
                        return (digest, None);
                    }
                    (digest, Some(transport.client(https)))
                })
                .await;
                match fresh {
                    Ok((_, None)) => {}
                    Ok((digest, Some(Ok(c)))) => {
                        client = Some(c);
                        made_from = Some(digest);
                    }
                    Ok((_, Some(Err(e)))) => {
                        tracing::error!(error = %e, "cannot set up the connection to the Alertmanagers; this batch is dropped");
                        client = None;
                        made_from = None;
                    }
                    Err(e) => tracing::error!(error = %e, "setting up the connection failed"),
                }
            }
            let payload = Bytes::from(body(&batch));
            let mut delivered = false;
            let login = {
                let transport = self.transport.clone();
                tokio::task::spawn_blocking(move || transport.authorization())
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
            };
            // Each Alertmanager at once, each within its own timeout.
            let sends: Vec<_> = self
                .endpoints
                .iter()
                .map(|e| {
                    let (client, payload, e) = (client.clone(), payload.clone(), e.clone());
                    let header = self.header.clone();
                    let login = login.clone();
                    tokio::spawn(async move {
                        let client = client.ok_or("no connection set up")?;
                        let mut req = http::Request::post(e.as_str());
                        if let Some((name, value)) = header {
                            req = req.header(name, value);
                        }
                        if let Some(value) = login? {
                            req = req.header(http::header::AUTHORIZATION, value);
                        }
                        let req = req
                            .header(http::header::CONTENT_TYPE, "application/json")
                            .header(
                                http::header::USER_AGENT,
                                concat!("Sluice/", env!("CARGO_PKG_VERSION")),
                            )
                            .body(Full::new(payload))
                            .map_err(|e| e.to_string())?;
                        match tokio::time::timeout(TIMEOUT, client.request(req)).await {
                            Ok(Ok(r)) if r.status().is_success() => Ok(()),
                            Ok(Ok(r)) => Err(format!("bad response status {}", r.status())),
                            Ok(Err(e)) => Err(e.to_string()),
                            Err(_) => Err("timed out".to_owned()),
                        }
                    })
                })
                .collect();
            let mut results = Vec::with_capacity(sends.len());
            for s in sends {
                results.push(s.await.unwrap_or_else(|e| Err(e.to_string())));
            }
            {
                let mut counts = self.counts.lock();
                for (k, r) in results.iter().enumerate() {
                    if let Some(c) = counts.0.get_mut(k) {
                        c.0 += batch.len() as u64;
                        if r.is_err() {
                            c.1 += 1;
                        }
                    }
                    match r {
                        Ok(()) => delivered = true,
                        Err(e) => {
                            tracing::warn!(alertmanager = %self.endpoints[k], error = %e, alerts = batch.len(), "sending alerts failed");
                        }
                    }
                }
                if !delivered {
                    counts.1 += batch.len() as u64;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_are_posted_in_alertmanagers_shape() {
        let a = Outgoing {
            labels: BTreeMap::from([("alertname".into(), "Hot".into())]),
            annotations: BTreeMap::new(),
            starts_at_ms: 1_700_000_000_000,
            ends_at_ms: 1_700_000_240_500,
            generator_url: "http://s/graph?g0.expr=x&g0.tab=1".into(),
        };
        assert_eq!(
            body(&[a]),
            r#"[{"endsAt":"2023-11-14T22:17:20.500Z","generatorURL":"http://s/graph?g0.expr=x&g0.tab=1","labels":{"alertname":"Hot"},"startsAt":"2023-11-14T22:13:20.000Z"}]"#
        );
        assert_eq!(endpoint("http://am:9093/"), "http://am:9093/api/v2/alerts");
        let n = Notifier::new(
            &["http://am:9093".into()],
            BTreeMap::from([("dc".into(), "eu".into())]),
            None,
            (Transport::default(), AlertRelabel::default()),
        );
        let many: Vec<Outgoing> = (0..QUEUE_CAPACITY + 5)
            .map(|i| Outgoing {
                labels: BTreeMap::from([("i".into(), i.to_string())]),
                annotations: BTreeMap::new(),
                starts_at_ms: 0,
                ends_at_ms: 0,
                generator_url: String::new(),
            })
            .collect();
        n.send(many);
        let f = n.figures();
        assert_eq!((f.queued, f.dropped), (QUEUE_CAPACITY as u64, 5));
        let first = n.queue.lock().front().cloned().expect("queued");
        assert_eq!(first.labels["i"], "5", "the oldest went");
        assert_eq!(first.labels["dc"], "eu");
    }
}
