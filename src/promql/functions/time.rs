//! Time: `time`, `timestamp`, and the calendar fields of a time (UTC).

use crate::promql::parser::{Call, Expr};

use crate::promql::eval::Ctx;
use crate::promql::value::{no_labels, Sample, Value};
use crate::promql::QueryError;

pub(super) fn time(_: &Ctx<'_>, _: &Call, t: i64) -> Result<Value, QueryError> {
    Ok(Value::Scalar(t as f64 / 1000.0))
}

pub(super) fn timestamp(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    // A plain selector gives each sample's own time; anything else
    // was computed at the evaluation time.
    let timed = match call.args.args[0].unparen() {
        Expr::VectorSelector(vs) => ctx.vector_selector_timed(vs, t)?,
        e => ctx.eval_vector(e, t)?.into_iter().map(|s| (s, t)).collect(),
    };
    Ok(Value::Vector(
        timed
            .into_iter()
            .map(|(s, ts)| Sample {
                labels: ctx.unnamed(&s.labels),
                v: ts as f64 / 1000.0,
                h: None,
                drop_name: true,
            })
            .collect(),
    ))
}

/// A calendar field of each element (a unix time in seconds), or of the
/// evaluation time when there is no argument.
fn calendar(ctx: &Ctx<'_>, call: &Call, t: i64, field: &str) -> Result<Value, QueryError> {
    let v = match call.args.args.first() {
        None => vec![Sample::float(no_labels(), t as f64 / 1000.0)],
        Some(e) => ctx.eval_vector(e, t)?,
    };
    Ok(Value::Vector(
        v.into_iter()
            .filter(|s| s.h.is_none())
            .map(|s| Sample {
                labels: ctx.unnamed(&s.labels),
                v: date_part(field, s.v),
                h: None,
                drop_name: true,
            })
            .collect(),
    ))
}

macro_rules! calendar_fields {
    ($($name:ident),*) => {$(
        pub(super) fn $name(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
            calendar(ctx, call, t, stringify!($name))
        }
    )*};
}

calendar_fields!(
    minute,
    hour,
    day_of_week,
    day_of_month,
    day_of_year,
    days_in_month,
    month,
    year
);

/// A calendar field of a unix time in seconds (UTC), as Prometheus'
/// date functions compute it; NaN stays NaN.
fn date_part(name: &str, secs: f64) -> f64 {
    use chrono::{Datelike, Timelike};
    if !secs.is_finite() {
        return f64::NAN;
    }
    let Some(t) = chrono::DateTime::from_timestamp(secs as i64, 0) else {
        return f64::NAN;
    };
    let v = match name {
        "minute" => t.minute(),
        "hour" => t.hour(),
        "day_of_week" => t.weekday().num_days_from_sunday(),
        "day_of_month" => t.day(),
        "day_of_year" => t.ordinal(),
        "days_in_month" => {
            let (y, m) = (t.year(), t.month());
            let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            chrono::NaiveDate::from_ymd_opt(next.0, next.1, 1)
                .and_then(|d| d.pred_opt())
                .map_or(0, |d| d.day())
        }
        "month" => t.month(),
        _ => return f64::from(t.year()),
    };
    f64::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_parts_are_utc_calendar_fields() {
        // 2024-02-29T13:45:00Z, a Thursday.
        let t = 1_709_214_300.0;
        assert_eq!(date_part("minute", t), 45.0);
        assert_eq!(date_part("hour", t), 13.0);
        assert_eq!(date_part("day_of_week", t), 4.0);
        assert_eq!(date_part("day_of_month", t), 29.0);
        assert_eq!(date_part("day_of_year", t), 60.0);
        assert_eq!(date_part("days_in_month", t), 29.0);
        assert_eq!(date_part("month", t), 2.0);
        assert_eq!(date_part("year", t), 2024.0);
        assert!(date_part("year", f64::NAN).is_nan());
    }
}
