//! What parsing is given and gives back besides the tree: the language
//! options, the error with its place, the longest duration.

/// The longest duration in seconds: an int64 count of nanoseconds.
pub const MAX_DURATION_SECS: f64 = 9_223_372_036.854_775;

/// The parts of the language that are behind a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// `promql-experimental-functions`.
    pub experimental_functions: bool,
    /// `promql-duration-expr`: `[5m * 2]`, `offset (1h + step())`; on by
    /// default, as in Prometheus v3.14.
    pub duration_expr: bool,
    /// `promql-extended-range-selectors`: `anchored` and `smoothed`.
    pub extended_range_selectors: bool,
    /// `promql-binop-fill-modifiers`: `fill`, `fill_left`, `fill_right`.
    pub binop_fill_modifiers: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            experimental_functions: false,
            duration_expr: true,
            extended_range_selectors: false,
            binop_fill_modifiers: false,
        }
    }
}

/// Why a query does not parse, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset of the start of the problem.
    pub start: usize,
    /// Byte offset of its end.
    pub end: usize,
    /// Line (1-based) of the start.
    pub line: usize,
    /// Column (1-based, in characters) of the start.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl ParseError {
    pub(crate) fn new(input: &str, start: usize, end: usize, message: String) -> Self {
        let start = start.min(input.len());
        let before = input.get(..start).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Self {
            start,
            end: end.max(start),
            line,
            column,
            message,
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: parse error: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for ParseError {}
