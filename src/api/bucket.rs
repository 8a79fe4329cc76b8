//! A tenant's ingestion rate limit: a token bucket of `ingestion_rate`
//! tokens a second up to `ingestion_burst_size`, one token per sample or
//! histogram sample (Mimir's `ingestion_rate` and `ingestion_burst_size`).

use std::time::Instant;

use crate::config::runtime::TenantLimits;

/// The longest `Retry-After` given: a sender held longer (a tiny rate) is
/// told again when it comes back.
pub const MAX_RETRY_AFTER_SECS: u64 = 300;

/// A tenant's ingestion token bucket: `ingestion_rate` tokens a second up
/// to `ingestion_burst_size`, one per sample or histogram sample. It starts
/// full.
#[derive(Debug, Default)]
pub struct Bucket {
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` before the first
    /// request (a full bucket).
    last: Option<Instant>,
}

/// Why a request's samples were refused by the rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateRefusal {
    /// More than the burst: it can never pass.
    TooLarge {
        /// Samples the request carries.
        samples: u64,
        /// The tenant's burst.
        burst: u64,
    },
    /// Over the rate now: it can pass in `wait_secs`.
    Wait {
        /// Samples the request carries.
        samples: u64,
        /// The tenant's rate.
        rate: f64,
        /// The tenant's burst.
        burst: u64,
        /// Whole seconds until there are tokens enough.
        wait_secs: u64,
    },
}

impl Bucket {
    /// Takes `samples` tokens at `now` under `limits`, or says why not.
    /// A rate of 0 takes everything.
    pub fn take(
        &mut self,
        samples: u64,
        limits: &TenantLimits,
        now: Instant,
    ) -> Result<(), RateRefusal> {
        let (rate, burst) = (limits.ingestion_rate, limits.ingestion_burst_size);
        if rate <= 0.0 {
            return Ok(());
        }
        self.refill(limits, now);
        if samples > burst {
            return Err(RateRefusal::TooLarge { samples, burst });
        }
        let want = samples as f64;
        if self.tokens >= want {
            self.tokens -= want;
            return Ok(());
        }
        let wait = ((want - self.tokens) / rate).ceil();
        Err(RateRefusal::Wait {
            samples,
            rate,
            burst,
            wait_secs: (wait as u64).clamp(1, MAX_RETRY_AFTER_SECS),
        })
    }

    /// Takes `samples` tokens already spent (a request stored before its
    /// count was known), going into debt that later requests wait out.
    pub fn charge(&mut self, samples: u64, limits: &TenantLimits, now: Instant) {
        if limits.ingestion_rate <= 0.0 {
            return;
        }
        self.refill(limits, now);
        // At most one burst of debt: a sender is never kept out longer
        // than a full bucket takes to fill.
        let floor = -(limits.ingestion_burst_size as f64);
        self.tokens = (self.tokens - samples as f64).max(floor);
    }

    /// Gives back `samples` tokens taken for samples that were not
    /// stored after all (dropped by relabel rules: Mimir counts its rate
    /// after relabelling), up to a full bucket.
    pub fn refund(&mut self, samples: u64, limits: &TenantLimits, now: Instant) {
        if limits.ingestion_rate <= 0.0 {
            return;
        }
        self.refill(limits, now);
        self.tokens = (self.tokens + samples as f64).min(limits.ingestion_burst_size as f64);
    }

    /// Refuses a request while the bucket holds less than one token at
    /// `now` (it is spent, or a charged request overdrew it): no request
    /// could pass, so it is refused before its body is decoded.
    pub fn check_open(&mut self, limits: &TenantLimits, now: Instant) -> Result<(), RateRefusal> {
        if limits.ingestion_rate <= 0.0 {
            return Ok(());
        }
        self.refill(limits, now);
        if self.tokens >= 1.0 {
            return Ok(());
        }
        Err(RateRefusal::Wait {
            samples: 0,
            rate: limits.ingestion_rate,
            burst: limits.ingestion_burst_size,
            wait_secs: (((1.0 - self.tokens) / limits.ingestion_rate).ceil() as u64)
                .clamp(1, MAX_RETRY_AFTER_SECS),
        })
    }

    fn refill(&mut self, limits: &TenantLimits, now: Instant) {
        let burst = limits.ingestion_burst_size as f64;
        self.tokens = match self.last {
            None => burst,
            Some(last) => {
                let secs = now.saturating_duration_since(last).as_secs_f64();
                (self.tokens + secs * limits.ingestion_rate).min(burst)
            }
        };
        self.last = Some(now);
    }
}

impl RateRefusal {
    /// The refusal, worded for the sender, naming the tenant and limit.
    pub fn message(&self, tenant: &str) -> String {
        match *self {
            RateRefusal::TooLarge { samples, burst } => format!(
                "tenant {tenant}: the request carries {samples} samples, more than its \
                 ingestion_burst_size of {burst}: it can never pass; send smaller batches \
                 (Prometheus: queue_config.max_samples_per_send) or raise the limit"
            ),
            RateRefusal::Wait {
                samples,
                rate,
                burst,
                wait_secs,
            } => format!(
                "tenant {tenant}: ingestion rate limit of {rate} samples/s (burst {burst}) \
                 reached; {} can pass in {wait_secs}s",
                match samples {
                    0 => "a request".to_owned(),
                    n => format!("the request's {n} samples"),
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(rate: f64, burst: u64) -> TenantLimits {
        TenantLimits {
            ingestion_rate: rate,
            ingestion_burst_size: burst,
            ..TenantLimits::default()
        }
    }

    #[test]
    fn the_bucket_starts_full_refills_at_the_rate_and_never_passes_more_than_the_burst() {
        let l = limits(100.0, 1000);
        let t0 = Instant::now();
        let mut b = Bucket::default();
        assert_eq!(b.take(1000, &l, t0), Ok(()));
        match b.take(50, &l, t0) {
            Err(RateRefusal::Wait { wait_secs, .. }) => assert_eq!(wait_secs, 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.take(50, &l, t0 + Duration::from_millis(500)), Ok(()));
        match b.take(300, &l, t0 + Duration::from_millis(500)) {
            Err(RateRefusal::Wait { wait_secs, .. }) => assert_eq!(wait_secs, 3),
            other => panic!("{other:?}"),
        }
        // Ten idle minutes refill only to the burst.
        let later = t0 + Duration::from_secs(600);
        assert_eq!(b.take(1000, &l, later), Ok(()));
        assert!(matches!(
            b.take(1001, &l, later + Duration::from_secs(600)),
            Err(RateRefusal::TooLarge {
                samples: 1001,
                burst: 1000
            })
        ));
        // No rate: no limit.
        assert_eq!(b.take(u64::MAX, &limits(0.0, 1), later), Ok(()));
    }

    #[test]
    fn a_charge_past_the_tokens_is_debt_waited_out_at_the_rate() {
        let l = limits(10.0, 100);
        let t0 = Instant::now();
        let mut b = Bucket::default();
        b.charge(1000, &l, t0);
        // Debt is capped at one burst: 100 below zero, and one token is
        // needed, so 101 tokens: 11 s at 10/s.
        let wait = |b: &mut Bucket, at| match b.check_open(&l, at) {
            Ok(()) => None,
            Err(RateRefusal::Wait { wait_secs, .. }) => Some(wait_secs),
            Err(e) => panic!("{e:?}"),
        };
        assert_eq!(wait(&mut b, t0), Some(11));
        assert_eq!(wait(&mut b, t0 + Duration::from_secs(5)), Some(6));
        assert_eq!(wait(&mut b, t0 + Duration::from_secs(11)), None);
    }
}
