//! A destination's shards: each batches the samples dealt to it, encodes a
//! remote-write 1.0 request straight from the canonical label bytes (they
//! are already the `TimeSeries.labels` field), snappy-compresses it and
//! posts it, retrying as Prometheus' queue manager does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::{connect::HttpConnector, Client as HttpClient};
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, watch};

use super::destination::{Destination, Protocol};
use super::stats::Stats;
use super::tracker::Tracker;
use crate::encoding::put_uvarint;
use crate::protocol::remote_write::encode;

/// One sample on its way: the record it came from, its series' canonical
/// labels, and the point.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub seq: u64,
    /// The series' WAL reference: which shard it goes through.
    pub series: u64,
    pub labels: Arc<[u8]>,
    pub t: i64,
    pub v: f64,
    /// For a native histogram sample: its encoded remote-write
    /// `Histogram` message (the same in 1.0 and 2.0); `v` is then unused.
    pub hist: Option<Arc<[u8]>>,
}

impl Sample {
    /// Whether `other` can share this sample's `TimeSeries`: the same
    /// series and the same kind (2.0 forbids floats and histograms in one).
    fn runs_with(&self, other: &Sample) -> bool {
        Arc::ptr_eq(&self.labels, &other.labels) && self.hist.is_some() == other.hist.is_some()
    }

    /// The bytes of its `samples` or `histograms` entry.
    fn field_len(&self) -> usize {
        match &self.hist {
            // 1.0's and 2.0's histograms fields (4 and 3) tag alike in length.
            Some(h) => encode::len_delimited_len(encode::v1::TIMESERIES_HISTOGRAMS, h.len()),
            None => encode::sample_field_len(self.t),
        }
    }

    /// Writes its entry; `hist_field` is the histograms field's number.
    fn write_field(&self, out: &mut Vec<u8>, hist_field: u32) {
        match &self.hist {
            Some(h) => {
                encode::put_len_header(out, hist_field, h.len());
                out.extend_from_slice(h);
            }
            None => encode::put_sample_field(out, self.t, self.v),
        }
    }
}

/// Spreads series references over shards.
pub(super) fn mix(r: u64) -> u64 {
    r.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

/// The first wait after a failed send; doubled per failure up to
/// [`MAX_BACKOFF`] (Prometheus' `min_backoff` and `max_backoff`).
const MIN_BACKOFF: Duration = Duration::from_millis(30);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// How long an attempt in flight at shutdown may still finish.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Most bytes of an error answer kept for the log.
const MAX_ERROR_BODY: usize = 1024;

#[derive(Debug, Clone)]
enum Auth {
    None,
    Basic {
        user: String,
        password: Option<String>,
        file: Option<std::path::PathBuf>,
    },
    Bearer(String),
    BearerFile(std::path::PathBuf),
}

/// A destination's HTTP client and fixed request parts.
#[derive(Debug, Clone)]
pub(super) struct Client {
    http: HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: http::Uri,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
    auth: Arc<Auth>,
    timeout: Duration,
    protocol: Protocol,
}

/// What one attempt came to.
#[derive(Debug)]
enum Outcome {
    Sent,
    /// Worth another try, after `after` if the receiver said.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// Refused for good (a 4xx other than 429).
    Refused(String),
}

impl Client {
    /// The client for `dest`; for https, its TLS files are read now.
    pub(super) fn new(dest: &Destination) -> Result<Self, String> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(dest.timeout));
        connector.enforce_http(false);
        // A plain http destination gets a TLS setup that trusts nothing and
        // is never used: the connector type stays one.
        let https = dest.target()?.https;
        let config = if https {
            dest.tls_config.client_config()?
        } else {
            super::tls::TlsConfig::plain_http()?
        };
        let tls = HttpsConnectorBuilder::new().with_tls_config(config);
        let mut tls = if https {
            tls.https_only()
        } else {
            tls.https_or_http()
        };
        if let Some(name) = &dest.tls_config.server_name {
            let name = rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|e| format!("tls server-name {name:?}: {e}"))?;
            tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
        }
        let tls = tls.enable_http1();
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(tls.wrap_connector(connector));
        let headers = dest
            .headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        let auth = if let Some(t) = &dest.bearer_token {
            Auth::Bearer(t.clone())
        } else if let Some(f) = &dest.bearer_token_file {
            Auth::BearerFile(f.clone())
        } else if let Some(u) = &dest.basic_auth_username {
            Auth::Basic {
                user: u.clone(),
                password: dest.basic_auth_password.clone(),
                file: dest.basic_auth_password_file.clone(),
            }
        } else {
            Auth::None
        };
        Ok(Self {
            http,
            uri: dest.url.parse().unwrap_or_default(),
            headers: Arc::new(headers),
            auth: Arc::new(auth),
            timeout: dest.timeout,
            protocol: dest.protocol,
        })
    }

    fn authorization(&self) -> Result<Option<String>, String> {
        let read = |f: &std::path::Path| {
            std::fs::read_to_string(f)
                .map(|s| s.trim().to_owned())
                .map_err(|e| format!("cannot read {}: {e}", f.display()))
        };
        Ok(match &*self.auth {
            Auth::None => None,
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::BearerFile(f) => Some(format!("Bearer {}", read(f)?)),
            Auth::Basic {
                user,
                password,
                file,
            } => {
                let password = match (password, file) {
                    (Some(p), _) => p.clone(),
                    (None, Some(f)) => read(f)?,
                    (None, None) => String::new(),
                };
                use base64::Engine as _;
                let token =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(format!("Basic {token}"))
            }
        })
    }

    async fn post(&self, body: Bytes) -> Outcome {
        let auth = match self.authorization() {
            Ok(a) => a,
            Err(why) => return Outcome::Retry { after: None, why },
        };
        let (content_type, version) = match self.protocol {
            Protocol::RemoteWrite1 => ("application/x-protobuf", "0.1.0"),
            Protocol::RemoteWrite2 => (
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
                "2.0.0",
            ),
        };
        let mut req = Request::post(self.uri.clone())
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::CONTENT_ENCODING, "snappy")
            .header(
                http::header::USER_AGENT,
                concat!("Sluice/", env!("CARGO_PKG_VERSION")),
            )
            .header("X-Prometheus-Remote-Write-Version", version);
        for (k, v) in self.headers.iter() {
            req = req.header(k, v);
        }
        if let Some(a) = auth {
            req = req.header(http::header::AUTHORIZATION, a);
        }
        let req = match req.body(Full::new(body)) {
            Ok(r) => r,
            Err(e) => return Outcome::Refused(format!("cannot build the request: {e}")),
        };
        let answer = tokio::time::timeout(self.timeout, async {
            let resp = self.http.request(req).await.map_err(|e| {
                let mut msg = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(": ");
                    msg.push_str(&s.to_string());
                    src = s.source();
                }
                msg
            })?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
            let body = Limited::new(resp.into_body(), 64 << 10)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)])
                .trim()
                .to_owned();
            Ok::<_, String>((status, retry_after, text))
        })
        .await;
        match answer {
            Err(_) => Outcome::Retry {
                after: None,
                why: format!("no answer within {:?}", self.timeout),
            },
            Ok(Err(why)) => Outcome::Retry { after: None, why },
            Ok(Ok((status, _, _))) if status.is_success() => Outcome::Sent,
            Ok(Ok((status, after, text)))
                if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() =>
            {
                Outcome::Retry {
                    after,
                    why: format!("{status}: {text}"),
                }
            }
            Ok(Ok((status, _, text))) => Outcome::Refused(format!("{status}: {text}")),
        }
    }
}

/// One shard's part of a destination.
#[derive(Debug)]
pub(super) struct Shard {
    pub name: String,
    pub shard: usize,
    pub dest: Arc<Destination>,
    pub client: Client,
    pub stats: Stats,
    pub tracker: Arc<Tracker>,
    pub rx: mpsc::Receiver<Vec<Sample>>,
    pub stop: watch::Receiver<bool>,
}

/// Samples waiting in a shard, as the parts they came in (no copy).
#[derive(Debug, Default)]
struct Pending {
    parts: std::collections::VecDeque<Vec<Sample>>,
    len: usize,
}

impl Pending {
    /// Queues a part's samples, unless its record was given up for lag
    /// while it waited (its samples are counted dropped already).
    fn take(&mut self, part: Vec<Sample>, tracker: &Tracker) {
        if part.first().is_some_and(|x| !tracker.given_up(x.seq)) {
            self.len += part.len();
            self.parts.push_back(part);
        }
    }

    /// Takes up to `max` samples, whole parts first, leaving out parts
    /// given up for lag since they were queued.
    fn batch(&mut self, max: usize, tracker: &Tracker) -> Vec<Vec<Sample>> {
        let mut out = Vec::new();
        let mut n = 0;
        while let Some(mut part) = self.parts.pop_front() {
            if part.first().is_none_or(|x| tracker.given_up(x.seq)) {
                self.len -= part.len();
                continue;
            }
            let room = max.saturating_sub(n);
            if room == 0 {
                self.parts.push_front(part);
                break;
            }
            if part.len() > room {
                let rest = part.split_off(room);
                self.parts.push_front(rest);
            }
            n += part.len();
            out.push(part);
        }
        self.len -= n;
        out
    }
}

/// Sends batches until the stop flag is set or the queue closes. A closed
/// queue means the shard count changes: the batch in flight is finished,
/// and what was not yet sent is handed back, in order, for the new shards.
pub(super) async fn run_shard(mut s: Shard) -> Vec<Vec<Sample>> {
    let max = s.dest.max_samples_per_send;
    let mut pending = Pending::default();
    let mut proto = Vec::new();
    let mut v2 = V2::default();
    let mut encoder = snap::raw::Encoder::new();
    let mut last_refusal_logged: Option<Instant> = None;
    let mut closed = false;
    loop {
        if pending.len == 0 {
            tokio::select! {
                part = s.rx.recv() => match part {
                    Some(p) => pending.take(p, &s.tracker),
                    None => return Vec::new(),
                },
                _ = s.stop.changed() => return Vec::new(),
            }
            if pending.len == 0 {
                continue;
            }
        }
        let deadline = tokio::time::Instant::now() + s.dest.batch_send_deadline;
        while pending.len < max && !closed {
            tokio::select! {
                part = s.rx.recv() => match part {
                    Some(p) => pending.take(p, &s.tracker),
                    None => closed = true,
                },
                () = tokio::time::sleep_until(deadline) => break,
                _ = s.stop.changed() => return Vec::new(),
            }
        }
        if closed || s.rx.is_closed() {
            while let Ok(p) = s.rx.try_recv() {
                pending.take(p, &s.tracker);
            }
            return pending.parts.into();
        }
        let batch = pending.batch(max, &s.tracker);
        let samples: usize = batch.iter().map(Vec::len).sum();
        if samples == 0 {
            continue;
        }
        proto.clear();
        match s.dest.protocol {
            Protocol::RemoteWrite1 => {
                for part in &batch {
                    encode(part, &mut proto);
                }
            }
            Protocol::RemoteWrite2 => v2.encode(&batch, &mut proto),
        }
        let body = match encoder.compress_vec(&proto) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                tracing::error!(destination = %s.name, error = %e, "cannot compress a batch; dropping it");
                s.stats.failed.inc_by(samples as u64);
                ack(&s.tracker, &batch);
                continue;
            }
        };
        crate::reuse::trim(&mut proto);
        let mut backoff = MIN_BACKOFF;
        loop {
            let started = Instant::now();
            let attempt = s.client.post(body.clone());
            tokio::pin!(attempt);
            let outcome = tokio::select! {
                o = &mut attempt => o,
                _ = s.stop.changed() => {
                    // Let the attempt in flight finish, briefly: what it
                    // delivers need not be sent again after the restart.
                    if let Ok(Outcome::Sent) = tokio::time::timeout(STOP_GRACE, &mut attempt).await {
                        s.stats.sent.inc_by(samples as u64);
                        ack(&s.tracker, &batch);
                    }
                    return Vec::new();
                }
            };
            s.stats
                .send_seconds
                .observe(started.elapsed().as_secs_f64());
            match outcome {
                Outcome::Sent => {
                    s.stats.sent.inc_by(samples as u64);
                    if let Some(t) = batch.iter().flatten().map(|x| x.t).max() {
                        let secs = t as f64 / 1000.0;
                        if secs > s.stats.highest_sent_seconds.get() {
                            s.stats.highest_sent_seconds.set(secs);
                        }
                    }
                    break;
                }
                Outcome::Refused(why) => {
                    s.stats.failed.inc_by(samples as u64);
                    if last_refusal_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                        last_refusal_logged = Some(Instant::now());
                        tracing::error!(destination = %s.name, shard = s.shard, samples, answer = %why, "forward destination refused a batch; dropped it (logged at most once a minute)");
                    }
                    break;
                }
                Outcome::Retry { .. }
                    if batch.iter().flatten().all(|x| s.tracker.given_up(x.seq)) =>
                {
                    // Given up for lag meanwhile, and counted dropped.
                    break;
                }
                Outcome::Retry { after, why } => {
                    s.stats.retried.inc_by(samples as u64);
                    let wait = after.unwrap_or(backoff);
                    tracing::warn!(destination = %s.name, shard = s.shard, error = %why, retry_in = ?wait, "forward send failed; retrying");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = s.stop.changed() => return Vec::new(),
                    }
                }
            }
        }
        ack(&s.tracker, &batch);
    }
}

/// Acknowledges a batch's samples, record by record.
fn ack(tracker: &Tracker, batch: &[Vec<Sample>]) {
    let mut run: Option<(u64, u32)> = None;
    for s in batch.iter().flatten() {
        match &mut run {
            Some((seq, n)) if *seq == s.seq => *n += 1,
            _ => {
                if let Some((seq, n)) = run {
                    tracker.ack(seq, n);
                }
                run = Some((s.seq, 1));
            }
        }
    }
    if let Some((seq, n)) = run {
        tracker.ack(seq, n);
    }
}

/// Appends the `WriteRequest.timeseries` of `batch` to `out` (so parts
/// appended one after another make one request): one `TimeSeries` per run
/// of samples of the same series.
pub(super) fn encode(batch: &[Sample], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < batch.len() {
        let labels = &batch[i].labels;
        let mut j = i + 1;
        while j < batch.len() && batch[i].runs_with(&batch[j]) {
            j += 1;
        }
        let samples = &batch[i..j];
        let samples_len: usize = samples.iter().map(Sample::field_len).sum();
        let len = labels.len() + samples_len;
        encode::put_len_header(out, encode::v1::WRITE_REQUEST_TIMESERIES, len);
        out.extend_from_slice(labels); // TimeSeries.labels, as stored
        for s in samples {
            s.write_field(out, encode::v1::TIMESERIES_HISTOGRAMS);
        }
        i = j;
    }
}

/// Remote write 2.0 encoding buffers, kept between batches.
#[derive(Debug, Default)]
pub(super) struct V2 {
    /// The symbols in reference order, as `Request.symbols` fields.
    table: Vec<u8>,
    /// The request's `timeseries` fields.
    series: Vec<u8>,
    refs: Vec<u8>,
}

impl V2 {
    /// Writes an `io.prometheus.write.v2.Request` of `batch` into `out`:
    /// the symbols (the empty string first), then one `TimeSeries` per run
    /// of samples of the same series, its labels as references.
    pub(super) fn encode(&mut self, batch: &[Vec<Sample>], out: &mut Vec<u8>) {
        // Symbols borrow the batch's label bytes: one map per request.
        let mut symbols: hashbrown::HashMap<&[u8], u32> =
            hashbrown::HashMap::with_capacity(batch.iter().map(Vec::len).sum::<usize>() + 16);
        self.table.clear();
        self.series.clear();
        symbol(&mut symbols, &mut self.table, b"");
        for part in batch {
            let mut i = 0;
            while i < part.len() {
                let labels = &part[i].labels;
                let mut j = i + 1;
                while j < part.len() && part[i].runs_with(&part[j]) {
                    j += 1;
                }
                self.refs.clear();
                for (name, value) in encode::label_pairs(labels) {
                    let n = symbol(&mut symbols, &mut self.table, name);
                    let v = symbol(&mut symbols, &mut self.table, value);
                    put_uvarint(&mut self.refs, u64::from(n));
                    put_uvarint(&mut self.refs, u64::from(v));
                }
                let samples = &part[i..j];
                let samples_len: usize = samples.iter().map(Sample::field_len).sum();
                let refs = encode::v2::TIMESERIES_LABELS_REFS;
                let len = encode::len_delimited_len(refs, self.refs.len()) + samples_len;
                encode::put_len_header(&mut self.series, encode::v2::REQUEST_TIMESERIES, len);
                encode::put_len_header(&mut self.series, refs, self.refs.len());
                self.series.extend_from_slice(&self.refs);
                for s in samples {
                    s.write_field(&mut self.series, encode::v2::TIMESERIES_HISTOGRAMS);
                }
                i = j;
            }
        }
        out.extend_from_slice(&self.table);
        out.extend_from_slice(&self.series);
        crate::reuse::trim(&mut self.series);
        crate::reuse::trim(&mut self.table);
    }
}

/// The reference of `sym`, appended to `table` (`Request.symbols`) if new.
fn symbol<'a>(
    symbols: &mut hashbrown::HashMap<&'a [u8], u32>,
    table: &mut Vec<u8>,
    sym: &'a [u8],
) -> u32 {
    let next = u32::try_from(symbols.len()).unwrap_or(u32::MAX);
    *symbols.entry(sym).or_insert_with(|| {
        encode::put_len_header(table, encode::v2::REQUEST_SYMBOLS, sym.len());
        table.extend_from_slice(sym);
        next
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn batches_decode_as_the_write_requests_prometheus_sends() {
        let mut labels = Vec::new();
        crate::storage::labels::encode_canonical([("__name__", "up"), ("job", "a")], &mut labels);
        let a: Arc<[u8]> = Arc::from(&labels[..]);
        labels.clear();
        crate::storage::labels::encode_canonical([("__name__", "up"), ("job", "b")], &mut labels);
        let b: Arc<[u8]> = Arc::from(&labels[..]);
        let s = |l: &Arc<[u8]>, t: i64, v: f64| Sample {
            seq: 0,
            series: 0,
            labels: Arc::clone(l),
            t,
            v,
            hist: None,
        };
        let batch = [
            s(&a, 1000, 1.0),
            s(&a, 2000, f64::NAN),
            s(&b, -5, 0.5),
            s(&a, i64::MAX, f64::INFINITY),
        ];
        let mut out = Vec::new();
        encode(&batch, &mut out);
        let req = crate::proto::prometheus::WriteRequest::decode(&out[..]).expect("decodes");
        assert_eq!(
            req.timeseries.len(),
            3,
            "runs of one series share a TimeSeries"
        );
        let got: Vec<(String, i64, u64)> = req
            .timeseries
            .iter()
            .flat_map(|ts| {
                let job = ts.labels[1].value.clone();
                ts.samples
                    .iter()
                    .map(move |x| (job.clone(), x.timestamp, x.value.to_bits()))
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), 1000, 1.0f64.to_bits()),
                ("a".into(), 2000, f64::NAN.to_bits()),
                ("b".into(), -5, 0.5f64.to_bits()),
                ("a".into(), i64::MAX, f64::INFINITY.to_bits()),
            ]
        );
        assert_eq!(req.timeseries[0].labels[0].name, "__name__");
    }

    #[test]
    fn batches_take_whole_parts_and_split_only_the_last() {
        let tracker = Tracker::new(crate::wal::Position::default());
        let part = |seq: u64, n: usize| -> Vec<Sample> {
            (0..n)
                .map(|i| Sample {
                    seq,
                    series: 0,
                    labels: Arc::from(&b""[..]),
                    t: i as i64,
                    v: 0.0,
                    hist: None,
                })
                .collect()
        };
        let a = tracker.push(crate::wal::Position::default(), 3);
        let b = tracker.push(crate::wal::Position::default(), 4);
        let mut p = Pending::default();
        p.take(part(a, 3), &tracker);
        p.take(part(b, 4), &tracker);
        let first = p.batch(5, &tracker);
        assert_eq!(first.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(p.len, 2);
        let second = p.batch(5, &tracker);
        assert_eq!(second.iter().map(Vec::len).collect::<Vec<_>>(), [2]);
        assert_eq!((second[0][0].seq, second[0][0].t), (b, 2), "in order");
        assert_eq!(p.len, 0);
    }

    #[test]
    fn v2_batches_decode_with_one_symbol_table_as_prometheus_3_reads_them() {
        let mut raw = Vec::new();
        crate::storage::labels::encode_canonical(
            [("__name__", "up"), ("job", "a"), ("x", "")],
            &mut raw,
        );
        let a: Arc<[u8]> = Arc::from(&raw[..]);
        raw.clear();
        crate::storage::labels::encode_canonical([("__name__", "up"), ("job", "b")], &mut raw);
        let b: Arc<[u8]> = Arc::from(&raw[..]);
        let s = |l: &Arc<[u8]>, t: i64, v: f64| Sample {
            seq: 0,
            series: 0,
            labels: Arc::clone(l),
            t,
            v,
            hist: None,
        };
        let batch = vec![
            vec![s(&a, 1000, 1.0), s(&a, 2000, 2.0)],
            vec![s(&b, -1, 0.5)],
        ];
        let mut out = Vec::new();
        V2::default().encode(&batch, &mut out);
        let req =
            crate::proto::io::prometheus::write::v2::Request::decode(&out[..]).expect("decodes");
        assert_eq!(req.symbols[0], "", "symbols[0] is the empty string");
        type Decoded = (Vec<(String, String)>, Vec<(i64, f64)>);
        let got: Vec<Decoded> = req
            .timeseries
            .iter()
            .map(|ts| {
                let labels = ts
                    .labels_refs
                    .chunks(2)
                    .map(|p| {
                        (
                            req.symbols[p[0] as usize].clone(),
                            req.symbols[p[1] as usize].clone(),
                        )
                    })
                    .collect();
                let samples = ts.samples.iter().map(|x| (x.timestamp, x.value)).collect();
                (labels, samples)
            })
            .collect();
        let l = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|&(n, v)| (n.to_owned(), v.to_owned()))
                .collect()
        };
        assert_eq!(
            got,
            [
                (
                    l(&[("__name__", "up"), ("job", "a"), ("x", "")]),
                    vec![(1000, 1.0), (2000, 2.0)]
                ),
                (l(&[("__name__", "up"), ("job", "b")]), vec![(-1, 0.5)]),
            ]
        );
        // "up" and "__name__" are stored once.
        assert_eq!(req.symbols.iter().filter(|s| *s == "up").count(), 1);
    }
}
