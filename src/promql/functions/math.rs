//! Math on each element, and the functions that convert, clamp or sort a
//! vector.

use crate::promql::parser::Call;

use super::args::{map_vector, scalar_arg};
use crate::promql::eval::Ctx;
use crate::promql::value::{no_labels, Sample, Value};
use crate::promql::QueryError;

/// Functions that apply `f64 -> f64` to every element, dropping `__name__`.
macro_rules! elementwise {
    ($($name:ident => $f:expr,)*) => {$(
        pub(super) fn $name(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
            map_vector(ctx, call, t, $f)
        }
    )*};
}

elementwise! {
    abs => f64::abs,
    ceil => f64::ceil,
    floor => f64::floor,
    sqrt => f64::sqrt,
    exp => f64::exp,
    ln => f64::ln,
    log2 => f64::log2,
    log10 => f64::log10,
    sgn => |v: f64| {
        if v > 0.0 {
            1.0
        } else if v < 0.0 {
            -1.0
        } else {
            v
        }
    },
    sin => f64::sin,
    cos => f64::cos,
    tan => f64::tan,
    asin => f64::asin,
    acos => f64::acos,
    atan => f64::atan,
    sinh => f64::sinh,
    cosh => f64::cosh,
    tanh => f64::tanh,
    asinh => f64::asinh,
    acosh => f64::acosh,
    atanh => f64::atanh,
    deg => f64::to_degrees,
    rad => f64::to_radians,
}

pub(super) fn round(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let to = if call.args.args.len() > 1 {
        scalar_arg(ctx, call, 1, t)?
    } else {
        1.0
    };
    // Go's math.Floor(v*(1/to)+0.5)/(1/to): rounds half up.
    let inv = 1.0 / to;
    map_vector(ctx, call, t, move |v| (v * inv + 0.5).floor() / inv)
}

pub(super) fn clamp(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let (lo, hi) = (scalar_arg(ctx, call, 1, t)?, scalar_arg(ctx, call, 2, t)?);
    if lo > hi {
        return Ok(Value::Vector(Vec::new()));
    }
    map_vector(ctx, call, t, move |v| go_max(lo, go_min(hi, v)))
}

/// Go's `math.Max`: NaN when either is NaN (Rust's `max` takes the other).
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Go's `math.Min`: NaN when either is NaN.
fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

pub(super) fn clamp_min(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let lo = scalar_arg(ctx, call, 1, t)?;
    map_vector(ctx, call, t, move |v| go_max(lo, v))
}

pub(super) fn clamp_max(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let hi = scalar_arg(ctx, call, 1, t)?;
    map_vector(ctx, call, t, move |v| go_min(hi, v))
}

pub(super) fn pi(_: &Ctx<'_>, _: &Call, _: i64) -> Result<Value, QueryError> {
    Ok(Value::Scalar(std::f64::consts::PI))
}

/// `min_of(a, b)`: the smaller scalar; NaN if either is (Go's `math.Min`).
pub(super) fn min_of(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let (a, b) = (scalar_arg(ctx, call, 0, t)?, scalar_arg(ctx, call, 1, t)?);
    Ok(Value::Scalar(if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }))
}

/// `max_of(a, b)`: the larger scalar; NaN if either is (Go's `math.Max`).
pub(super) fn max_of(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let (a, b) = (scalar_arg(ctx, call, 0, t)?, scalar_arg(ctx, call, 1, t)?);
    Ok(Value::Scalar(if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }))
}

pub(super) fn vector(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    Ok(Value::Vector(vec![Sample {
        labels: no_labels(),
        v: scalar_arg(ctx, call, 0, t)?,
        h: None,
        drop_name: false,
    }]))
}

pub(super) fn scalar(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    // The one float element; histograms do not count.
    let v = ctx.eval_vector(&call.args.args[0], t)?;
    let mut floats = v.iter().filter(|s| s.h.is_none());
    Ok(Value::Scalar(match (floats.next(), floats.next()) {
        (Some(s), None) => s.v,
        _ => f64::NAN,
    }))
}

pub(super) fn sort(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    sorted(ctx, call, t, false)
}

pub(super) fn sort_desc(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    sorted(ctx, call, t, true)
}

/// The float elements by value, NaN last either way (histograms left out).
fn sorted(ctx: &Ctx<'_>, call: &Call, t: i64, desc: bool) -> Result<Value, QueryError> {
    let mut v = ctx.eval_vector(&call.args.args[0], t)?;
    v.retain(|s| s.h.is_none());
    v.sort_by(|a, b| match (a.v.is_nan(), b.v.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ if desc => b.v.total_cmp(&a.v),
        _ => a.v.total_cmp(&b.v),
    });
    Ok(Value::Vector(v))
}
