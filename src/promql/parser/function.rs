//! The functions PromQL knows: their argument and return types, as
//! Prometheus v3.14's `promql/parser/functions.go` lists them.

use super::value::ValueType::{self, Matrix, Scalar, String, Vector};

/// A function's signature.
#[derive(Debug, PartialEq, Eq)]
pub struct Function {
    /// Its name.
    pub name: &'static str,
    /// The types of its arguments; a variadic function repeats the last.
    pub arg_types: &'static [ValueType],
    /// 0: exactly `arg_types`; n > 0: the last may be left out or repeated
    /// up to n times in all; -1: the last repeats without bound.
    pub variadic: i32,
    /// What it returns.
    pub return_type: ValueType,
    /// Behind `--enable-feature=promql-experimental-functions`.
    pub experimental: bool,
}

const fn f(
    name: &'static str,
    arg_types: &'static [ValueType],
    variadic: i32,
    return_type: ValueType,
    experimental: bool,
) -> Function {
    Function {
        name,
        arg_types,
        variadic,
        return_type,
        experimental,
    }
}

/// Every function, sorted by name (a test checks).
static FUNCTIONS: &[Function] = &[
    f("abs", &[Vector], 0, Vector, false),
    f("absent", &[Vector], 0, Vector, false),
    f("absent_over_time", &[Matrix], 0, Vector, false),
    f("acos", &[Vector], 0, Vector, false),
    f("acosh", &[Vector], 0, Vector, false),
    f("asin", &[Vector], 0, Vector, false),
    f("asinh", &[Vector], 0, Vector, false),
    f("atan", &[Vector], 0, Vector, false),
    f("atanh", &[Vector], 0, Vector, false),
    f("avg_over_time", &[Matrix], 0, Vector, false),
    f("ceil", &[Vector], 0, Vector, false),
    f("changes", &[Matrix], 0, Vector, false),
    f("clamp", &[Vector, Scalar, Scalar], 0, Vector, false),
    f("clamp_max", &[Vector, Scalar], 0, Vector, false),
    f("clamp_min", &[Vector, Scalar], 0, Vector, false),
    f("cos", &[Vector], 0, Vector, false),
    f("cosh", &[Vector], 0, Vector, false),
    f("count_over_time", &[Matrix], 0, Vector, false),
    f("day_of_month", &[Vector], 1, Vector, false),
    f("day_of_week", &[Vector], 1, Vector, false),
    f("day_of_year", &[Vector], 1, Vector, false),
    f("days_in_month", &[Vector], 1, Vector, false),
    f("deg", &[Vector], 0, Vector, false),
    f("delta", &[Matrix], 0, Vector, false),
    f("deriv", &[Matrix], 0, Vector, false),
    f(
        "double_exponential_smoothing",
        &[Matrix, Scalar, Scalar],
        0,
        Vector,
        true,
    ),
    f("end", &[], 0, Scalar, true),
    f("exp", &[Vector], 0, Vector, false),
    f("first_over_time", &[Matrix], 0, Vector, false),
    f("floor", &[Vector], 0, Vector, false),
    f("histogram_avg", &[Vector], 0, Vector, false),
    f("histogram_count", &[Vector], 0, Vector, false),
    f(
        "histogram_fraction",
        &[Scalar, Scalar, Vector],
        0,
        Vector,
        false,
    ),
    f("histogram_quantile", &[Scalar, Vector], 0, Vector, false),
    f(
        "histogram_quantiles",
        &[Vector, String, Scalar, Scalar],
        9,
        Vector,
        true,
    ),
    f("histogram_stddev", &[Vector], 0, Vector, false),
    f("histogram_stdvar", &[Vector], 0, Vector, false),
    f("histogram_sum", &[Vector], 0, Vector, false),
    f("hour", &[Vector], 1, Vector, false),
    f("idelta", &[Matrix], 0, Vector, false),
    f("increase", &[Matrix], 0, Vector, false),
    f("info", &[Vector, Vector], 1, Vector, true),
    f("irate", &[Matrix], 0, Vector, false),
    f(
        "label_join",
        &[Vector, String, String, String],
        -1,
        Vector,
        false,
    ),
    f(
        "label_replace",
        &[Vector, String, String, String, String],
        0,
        Vector,
        false,
    ),
    f("last_over_time", &[Matrix], 0, Vector, false),
    f("ln", &[Vector], 0, Vector, false),
    f("log10", &[Vector], 0, Vector, false),
    f("log2", &[Vector], 0, Vector, false),
    f("mad_over_time", &[Matrix], 0, Vector, true),
    f("max_of", &[Scalar, Scalar], 0, Scalar, true),
    f("max_over_time", &[Matrix], 0, Vector, false),
    f("min_of", &[Scalar, Scalar], 0, Scalar, true),
    f("min_over_time", &[Matrix], 0, Vector, false),
    f("minute", &[Vector], 1, Vector, false),
    f("month", &[Vector], 1, Vector, false),
    f("pi", &[], 0, Scalar, false),
    f("predict_linear", &[Matrix, Scalar], 0, Vector, false),
    f("present_over_time", &[Matrix], 0, Vector, false),
    f("quantile_over_time", &[Scalar, Matrix], 0, Vector, false),
    f("rad", &[Vector], 0, Vector, false),
    f("range", &[], 0, Scalar, true),
    f("rate", &[Matrix], 0, Vector, false),
    f("resets", &[Matrix], 0, Vector, false),
    f("round", &[Vector, Scalar], 1, Vector, false),
    f("scalar", &[Vector], 0, Scalar, false),
    f("sgn", &[Vector], 0, Vector, false),
    f("sin", &[Vector], 0, Vector, false),
    f("sinh", &[Vector], 0, Vector, false),
    f("sort", &[Vector], 0, Vector, false),
    f("sort_by_label", &[Vector, String], -1, Vector, true),
    f("sort_by_label_desc", &[Vector, String], -1, Vector, true),
    f("sort_desc", &[Vector], 0, Vector, false),
    f("sqrt", &[Vector], 0, Vector, false),
    f("start", &[], 0, Scalar, true),
    f("start_timestamp", &[Vector], 0, Vector, true),
    f("stddev_over_time", &[Matrix], 0, Vector, false),
    f("stdvar_over_time", &[Matrix], 0, Vector, false),
    f("step", &[], 0, Scalar, true),
    f("sum_over_time", &[Matrix], 0, Vector, false),
    f("tan", &[Vector], 0, Vector, false),
    f("tanh", &[Vector], 0, Vector, false),
    f("time", &[], 0, Scalar, false),
    f("timestamp", &[Vector], 0, Vector, false),
    f("ts_of_first_over_time", &[Matrix], 0, Vector, true),
    f("ts_of_last_over_time", &[Matrix], 0, Vector, true),
    f("ts_of_max_over_time", &[Matrix], 0, Vector, true),
    f("ts_of_min_over_time", &[Matrix], 0, Vector, true),
    f("vector", &[Scalar], 0, Vector, false),
    f("year", &[Vector], 1, Vector, false),
];

/// The function called `name`.
pub fn get(name: &str) -> Option<&'static Function> {
    FUNCTIONS
        .binary_search_by(|f| f.name.cmp(name))
        .ok()
        .map(|i| &FUNCTIONS[i])
}

/// Every function, for completion lists.
pub fn all() -> &'static [Function] {
    FUNCTIONS
}

#[cfg(test)]
mod tests {
    use super::FUNCTIONS;

    #[test]
    fn the_table_is_sorted_for_the_binary_search() {
        for w in FUNCTIONS.windows(2) {
            assert!(
                w[0].name < w[1].name,
                "{} must come after {}",
                w[0].name,
                w[1].name
            );
        }
    }
}
