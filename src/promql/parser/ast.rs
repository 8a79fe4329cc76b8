//! The syntax tree a query parses into.
//!
//! Its shape follows Prometheus' `promql/parser/ast.go`: selectors carry
//! their `offset`, `@`, `anchored` and `smoothed` modifiers; a range or an
//! offset written as a duration expression keeps that expression until the
//! query's step and range are known ([`Expr::resolve_durations`]).

use std::time::{Duration, SystemTime};

use super::function::Function;
use super::label::Matchers;
use super::token::{self, TokenId, TokenType};
use super::value::ValueType;

/// Where a node starts in the query, in bytes from its beginning: the
/// position a warning about it names (`(1:6)`), as Prometheus'
/// `PositionRange.Start`. Two trees that differ only in where their nodes
/// were written are the same query, so positions always compare equal.
#[derive(Debug, Clone, Copy, Default, Eq)]
pub struct Pos(pub u32);

impl PartialEq for Pos {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Pos {
    /// The position of byte `offset`.
    pub fn at(offset: usize) -> Self {
        Self(u32::try_from(offset).unwrap_or(u32::MAX))
    }

    /// Prometheus' `StartPosInput`: `line:column` of this position in
    /// `query`, both from 1, the column in bytes.
    pub fn line_col(self, query: &str) -> String {
        let pos = self.0 as usize;
        let Some(before) = query.as_bytes().get(..pos) else {
            return "invalid position".to_owned();
        };
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let col = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(pos + 1, |nl| pos - nl);
        format!("{line}:{col}")
    }
}

/// The label names of a `by`/`without`/`on`/`ignoring`/`group_*` list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Labels {
    /// The names in the order written.
    pub labels: Vec<String>,
}

impl Labels {
    /// A list of `names`.
    pub fn new(names: Vec<String>) -> Self {
        Self { labels: names }
    }

    /// Whether it names nothing.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// `by (…)`/`on (…)` (Include) or `without (…)`/`ignoring (…)` (Exclude).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelModifier {
    /// `by` or `on`.
    Include(Labels),
    /// `without` or `ignoring`.
    Exclude(Labels),
}

impl LabelModifier {
    /// The names listed.
    pub fn labels(&self) -> &Labels {
        match self {
            LabelModifier::Include(l) | LabelModifier::Exclude(l) => l,
        }
    }

    /// Whether it is `by`/`on`.
    pub fn is_include(&self) -> bool {
        matches!(self, LabelModifier::Include(_))
    }
}

/// How the two sides of a vector operation match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VectorMatchCardinality {
    /// One series on each side.
    OneToOne,
    /// `group_left (…)`.
    ManyToOne(Labels),
    /// `group_right (…)`.
    OneToMany(Labels),
    /// The set operators.
    ManyToMany,
}

impl VectorMatchCardinality {
    /// The labels `group_left`/`group_right` copy from the one side.
    pub fn labels(&self) -> Option<&Labels> {
        match self {
            VectorMatchCardinality::ManyToOne(l) | VectorMatchCardinality::OneToMany(l) => Some(l),
            _ => None,
        }
    }
}

/// The values `fill`, `fill_left` and `fill_right` put in for a series
/// missing on one side.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct VectorMatchFillValues {
    /// Used where the left side has no match.
    pub lhs: Option<f64>,
    /// Used where the right side has no match.
    pub rhs: Option<f64>,
}

impl VectorMatchFillValues {
    /// Whether any fill is set.
    pub fn any(&self) -> bool {
        self.lhs.is_some() || self.rhs.is_some()
    }
}

/// The modifiers of a binary operation.
#[derive(Debug, Clone, PartialEq)]
pub struct BinModifier {
    /// How the sides match.
    pub card: VectorMatchCardinality,
    /// `on (…)` or `ignoring (…)`.
    pub matching: Option<LabelModifier>,
    /// `bool` on a comparison.
    pub return_bool: bool,
    /// `fill (…)`, `fill_left (…)`, `fill_right (…)`.
    pub fill_values: VectorMatchFillValues,
}

impl Default for BinModifier {
    fn default() -> Self {
        Self {
            card: VectorMatchCardinality::OneToOne,
            matching: None,
            return_bool: false,
            fill_values: VectorMatchFillValues::default(),
        }
    }
}

/// A parsed `offset`: how far back a selector or subquery looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    /// Back in time.
    Pos(Duration),
    /// Forward in time (`offset -5m`).
    Neg(Duration),
}

impl Offset {
    /// From signed seconds.
    pub fn from_secs(s: f64) -> Self {
        // Rounded to nanoseconds, read in whole milliseconds, as Prometheus.
        let ms = ((s.abs() * 1e9).round() / 1e6).trunc() / 1000.0;
        let d = Duration::from_secs_f64(ms.min(super::options::MAX_DURATION_SECS));
        if s < 0.0 {
            Offset::Neg(d)
        } else {
            Offset::Pos(d)
        }
    }
}

/// `@ <time>`, `@ start()` or `@ end()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtModifier {
    /// `@ start()`.
    Start,
    /// `@ end()`.
    End,
    /// `@ <unix seconds>`.
    At(SystemTime),
}

/// A duration written as an expression (`[5m * 2]`, `offset (1h + step())`),
/// worked out once the query's step and range are known.
#[derive(Debug, Clone, PartialEq)]
pub enum DurationExpr {
    /// A number (seconds) or a duration literal.
    Number(f64, bool),
    /// `step()`: the range query's step, 0 for an instant query.
    Step,
    /// `range()`: end minus start of the query.
    Range,
    /// `min_of(a, b)`.
    MinOf(Box<DurationExpr>, Box<DurationExpr>),
    /// `max_of(a, b)`.
    MaxOf(Box<DurationExpr>, Box<DurationExpr>),
    /// `-x` (true) or `+x`.
    Unary(bool, Box<DurationExpr>),
    /// `a op b`, `op` one of `+ - * / % ^`.
    Binary(TokenId, Box<DurationExpr>, Box<DurationExpr>),
    /// `(x)`.
    Paren(Box<DurationExpr>),
}

impl DurationExpr {
    /// Its value in seconds for a query with `step` and `range` (seconds).
    pub fn eval(&self, step: f64, range: f64) -> Result<f64, String> {
        Ok(match self {
            DurationExpr::Number(v, _) => *v,
            DurationExpr::Step => step,
            DurationExpr::Range => range,
            DurationExpr::MinOf(a, b) => a.eval(step, range)?.min(b.eval(step, range)?),
            DurationExpr::MaxOf(a, b) => a.eval(step, range)?.max(b.eval(step, range)?),
            DurationExpr::Unary(neg, x) => {
                let v = x.eval(step, range)?;
                if *neg {
                    -v
                } else {
                    v
                }
            }
            DurationExpr::Paren(x) => x.eval(step, range)?,
            DurationExpr::Binary(op, a, b) => {
                let (l, r) = (a.eval(step, range)?, b.eval(step, range)?);
                match *op {
                    token::T_ADD => l + r,
                    token::T_SUB => l - r,
                    token::T_MUL => l * r,
                    token::T_DIV if r == 0.0 => return Err("division by zero".into()),
                    token::T_DIV => l / r,
                    token::T_MOD if r == 0.0 => return Err("modulo by zero".into()),
                    token::T_MOD => l % r,
                    _ => l.powf(r),
                }
            }
        })
    }

    /// Whether it needs the query's step or range.
    pub fn is_literal(&self) -> bool {
        matches!(self, DurationExpr::Number(..))
    }
}

/// Works out a duration expression, checked as Prometheus checks it.
pub fn duration_of(
    e: &DurationExpr,
    step: f64,
    range: f64,
    negative_allowed: bool,
) -> Result<f64, String> {
    let v = e.eval(step, range)?;
    if !v.is_finite() {
        return Err("duration is NaN or infinite".into());
    }
    if v <= 0.0 && !negative_allowed {
        return Err("duration must be greater than 0".into());
    }
    if v.abs() > super::options::MAX_DURATION_SECS {
        return Err("duration is out of range".into());
    }
    // Whole milliseconds, as Prometheus rounds them.
    Ok((v * 1000.0).trunc() / 1000.0)
}

/// `sum by (job) (x)`, `topk(3, x)` and the like.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateExpr {
    /// Where it starts.
    pub pos: Pos,
    /// The aggregation.
    pub op: TokenType,
    /// What it aggregates.
    pub expr: Box<Expr>,
    /// `k`, `q`, a label name: the parameter of those that take one.
    pub param: Option<Box<Expr>>,
    /// `by (…)` or `without (…)`.
    pub modifier: Option<LabelModifier>,
}

/// `-x` (`+x` parses to `x`).
#[derive(Debug, Clone, PartialEq)]
pub struct UnaryExpr {
    /// Where it starts.
    pub pos: Pos,
    /// The operand.
    pub expr: Box<Expr>,
}

/// `a op b`.
#[derive(Debug, Clone, PartialEq)]
pub struct BinaryExpr {
    /// The operator.
    pub op: TokenType,
    /// The left side.
    pub lhs: Box<Expr>,
    /// The right side.
    pub rhs: Box<Expr>,
    /// Matching, `bool` and fill modifiers; `None` between scalars.
    pub modifier: Option<BinModifier>,
}

impl BinaryExpr {
    /// Whether `bool` was written.
    pub fn return_bool(&self) -> bool {
        self.modifier.as_ref().is_some_and(|m| m.return_bool)
    }
}

/// `(x)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParenExpr {
    /// Where it starts.
    pub pos: Pos,
    /// What is inside.
    pub expr: Box<Expr>,
}

/// `x[range:step]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SubqueryExpr {
    /// The inner expression.
    pub expr: Box<Expr>,
    /// `offset`.
    pub offset: Option<Offset>,
    /// An offset written as an expression.
    pub offset_expr: Option<DurationExpr>,
    /// `@`.
    pub at: Option<AtModifier>,
    /// The range.
    pub range: Duration,
    /// A range written as an expression.
    pub range_expr: Option<DurationExpr>,
    /// The step; the default evaluation interval when `None`.
    pub step: Option<Duration>,
    /// A step written as an expression.
    pub step_expr: Option<DurationExpr>,
}

/// A number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumberLiteral {
    /// Where it starts.
    pub pos: Pos,
    /// Its value.
    pub val: f64,
    /// Whether it was written as a duration (`5m`, in seconds), which is
    /// how it is printed back.
    pub duration: bool,
}

/// A string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringLiteral {
    /// Where it starts.
    pub pos: Pos,
    /// Its value, invalid UTF-8 replaced.
    pub val: String,
    /// Its bytes, when they are not valid UTF-8 (`"\xff"`).
    pub raw: Option<Vec<u8>>,
}

impl StringLiteral {
    /// Whether its bytes are valid UTF-8.
    pub fn valid_utf8(&self) -> bool {
        self.raw.is_none()
    }

    /// Quoted as Go's `%q` quotes it: invalid bytes as `\xNN`.
    pub fn go_quoted(&self) -> String {
        match &self.raw {
            None => super::text::quote(&self.val),
            Some(bytes) => {
                let mut out = String::from("\"");
                for chunk in bytes.utf8_chunks() {
                    let q = super::text::quote(chunk.valid());
                    out.push_str(&q[1..q.len() - 1]);
                    for b in chunk.invalid() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                out.push('"');
                out
            }
        }
    }
}

/// `name{matchers}` with its modifiers.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSelector {
    /// Where it starts.
    pub pos: Pos,
    /// The metric name written before the braces.
    pub name: Option<String>,
    /// The matchers inside the braces.
    pub matchers: Matchers,
    /// `offset`.
    pub offset: Option<Offset>,
    /// An offset written as an expression.
    pub offset_expr: Option<DurationExpr>,
    /// `@`.
    pub at: Option<AtModifier>,
    /// `anchored` (`promql-extended-range-selectors`).
    pub anchored: bool,
    /// `smoothed` (`promql-extended-range-selectors`).
    pub smoothed: bool,
    /// `info()`'s second argument may match the empty value only.
    pub bypass_empty_matcher_check: bool,
}

impl VectorSelector {
    /// A selector of `name` and `matchers`, without modifiers.
    pub fn new(name: Option<String>, matchers: Matchers, pos: Pos) -> Self {
        Self {
            pos,
            name,
            matchers,
            offset: None,
            offset_expr: None,
            at: None,
            anchored: false,
            smoothed: false,
            bypass_empty_matcher_check: false,
        }
    }
}

/// `selector[range]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSelector {
    /// The selector.
    pub vs: VectorSelector,
    /// The range.
    pub range: Duration,
    /// A range written as an expression.
    pub range_expr: Option<DurationExpr>,
}

/// A function's arguments.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FunctionArgs {
    /// In the order written.
    pub args: Vec<Expr>,
}

/// `f(args)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Where it starts.
    pub pos: Pos,
    /// The function.
    pub func: &'static Function,
    /// Its arguments.
    pub args: FunctionArgs,
}

impl Call {
    /// [`Expr::step_invariant`] of the call.
    pub fn step_invariant(&self) -> bool {
        let args = || self.args.args.iter();
        const TIME_DEPENDENT: [&str; 16] = [
            "days_in_month",
            "day_of_month",
            "day_of_week",
            "day_of_year",
            "end",
            "hour",
            "minute",
            "month",
            "year",
            "predict_linear",
            "range",
            "start",
            "step",
            "time",
            "timestamp",
            "start_timestamp",
        ];
        if !TIME_DEPENDENT.contains(&self.func.name) {
            args().all(Expr::step_invariant)
        } else {
            matches!(self.func.name, "timestamp" | "start_timestamp")
                && args()
                    .all(|a| matches!(a.unparen(), Expr::VectorSelector(vs) if vs.at.is_some()))
        }
    }
}

/// A PromQL expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// An aggregation.
    Aggregate(AggregateExpr),
    /// A negation.
    Unary(UnaryExpr),
    /// A binary operation.
    Binary(BinaryExpr),
    /// Parentheses.
    Paren(ParenExpr),
    /// A subquery.
    Subquery(SubqueryExpr),
    /// A number.
    NumberLiteral(NumberLiteral),
    /// A string.
    StringLiteral(StringLiteral),
    /// An instant selector.
    VectorSelector(VectorSelector),
    /// A range selector.
    MatrixSelector(MatrixSelector),
    /// A function call.
    Call(Call),
}

impl Expr {
    /// Its direct subexpressions, in the order written.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Aggregate(a) => {
                let mut out = Vec::with_capacity(2);
                out.extend(a.param.as_deref());
                out.push(&a.expr);
                out
            }
            Expr::Unary(u) => vec![&u.expr],
            Expr::Binary(b) => vec![&b.lhs, &b.rhs],
            Expr::Paren(p) => vec![&p.expr],
            Expr::Subquery(sq) => vec![&sq.expr],
            Expr::Call(c) => c.args.args.iter().collect(),
            Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::VectorSelector(_)
            | Expr::MatrixSelector(_) => Vec::new(),
        }
    }

    /// [`Expr::children`], to change them.
    pub fn children_mut(&mut self) -> Vec<&mut Expr> {
        match self {
            Expr::Aggregate(a) => {
                let mut out = Vec::with_capacity(2);
                out.extend(a.param.as_deref_mut());
                out.push(&mut *a.expr);
                out
            }
            Expr::Unary(u) => vec![&mut u.expr],
            Expr::Binary(b) => vec![&mut b.lhs, &mut b.rhs],
            Expr::Paren(p) => vec![&mut p.expr],
            Expr::Subquery(sq) => vec![&mut sq.expr],
            Expr::Call(c) => c.args.args.iter_mut().collect(),
            Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::VectorSelector(_)
            | Expr::MatrixSelector(_) => Vec::new(),
        }
    }

    /// Whether it gives the same at every step of a range query, so that
    /// Prometheus evaluates it once (`preprocessExprHelper`): selectors and
    /// subqueries with `@`, literals, and operators and functions over
    /// those but the functions of the evaluation time (`time()`,
    /// `hour()`, `timestamp()` but of a selector with `@`, …).
    pub fn step_invariant(&self) -> bool {
        match self {
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) => true,
            Expr::VectorSelector(vs) => vs.at.is_some(),
            Expr::MatrixSelector(m) => m.vs.at.is_some(),
            Expr::Subquery(sq) => sq.at.is_some(),
            Expr::Paren(p) => p.expr.step_invariant(),
            Expr::Unary(u) => u.expr.step_invariant(),
            Expr::Aggregate(a) => a.expr.step_invariant(),
            Expr::Binary(b) => b.lhs.step_invariant() && b.rhs.step_invariant(),
            Expr::Call(c) => c.step_invariant(),
        }
    }

    /// What is inside any parentheses around it.
    pub fn unparen(&self) -> &Expr {
        let mut e = self;
        while let Expr::Paren(p) = e {
            e = &p.expr;
        }
        e
    }

    /// Where it starts: a binary operation, a range selector and a
    /// subquery where their first operand does, as in Prometheus.
    pub fn pos(&self) -> Pos {
        match self {
            Expr::Aggregate(a) => a.pos,
            Expr::Unary(u) => u.pos,
            Expr::Binary(b) => b.lhs.pos(),
            Expr::Paren(p) => p.pos,
            Expr::Subquery(sq) => sq.expr.pos(),
            Expr::NumberLiteral(n) => n.pos,
            Expr::StringLiteral(s) => s.pos,
            Expr::VectorSelector(vs) => vs.pos,
            Expr::MatrixSelector(m) => m.vs.pos,
            Expr::Call(c) => c.pos,
        }
    }

    /// The type of value it evaluates to.
    pub fn value_type(&self) -> ValueType {
        match self {
            Expr::Aggregate(_) | Expr::VectorSelector(_) => ValueType::Vector,
            Expr::Unary(u) => u.expr.value_type(),
            Expr::Binary(b) => {
                if b.lhs.value_type() == ValueType::Scalar
                    && b.rhs.value_type() == ValueType::Scalar
                {
                    ValueType::Scalar
                } else {
                    ValueType::Vector
                }
            }
            Expr::Paren(p) => p.expr.value_type(),
            Expr::Subquery(_) | Expr::MatrixSelector(_) => ValueType::Matrix,
            Expr::NumberLiteral(_) => ValueType::Scalar,
            Expr::StringLiteral(_) => ValueType::String,
            Expr::Call(c) => c.func.return_type,
        }
    }

    /// Works out every duration expression and folds `start()`, `end()`,
    /// `range()` and `step()` to numbers, for a query over `[start, end]`
    /// (unix ms) at `step` (ms; 0 for an instant query). Done once per
    /// query, before evaluation, as Prometheus' `PreprocessExpr` does.
    pub fn resolve_durations(&mut self, start: i64, end: i64, step: i64) -> Result<(), String> {
        let step_s = if start == end {
            0.0
        } else {
            step as f64 / 1000.0
        };
        let range_s = (end - start) as f64 / 1000.0;
        // Duration expressions see the step even of an instant query's
        // evaluation (0 there), as Prometheus passes it.
        let dstep = step as f64 / 1000.0;
        let mut stack: Vec<&mut Expr> = vec![self];
        while let Some(e) = stack.pop() {
            if let Expr::Call(c) = e {
                let folded = match c.func.name {
                    "start" => Some(start as f64 / 1000.0),
                    "end" => Some(end as f64 / 1000.0),
                    "range" => Some(range_s),
                    "step" => Some(step_s),
                    _ => None,
                };
                if let Some(val) = folded {
                    *e = Expr::NumberLiteral(NumberLiteral {
                        pos: c.pos,
                        val,
                        duration: false,
                    });
                    continue;
                }
            }
            match e {
                Expr::VectorSelector(vs) => {
                    resolve_offset(vs.offset_expr.as_ref(), &mut vs.offset, dstep, range_s)?
                }
                Expr::MatrixSelector(m) => {
                    resolve_offset(m.vs.offset_expr.as_ref(), &mut m.vs.offset, dstep, range_s)?;
                    if let Some(r) = &m.range_expr {
                        m.range = Duration::from_secs_f64(duration_of(r, dstep, range_s, false)?);
                    }
                }
                Expr::Subquery(sq) => {
                    resolve_offset(sq.offset_expr.as_ref(), &mut sq.offset, dstep, range_s)?;
                    if let Some(r) = &sq.range_expr {
                        sq.range = Duration::from_secs_f64(duration_of(r, dstep, range_s, false)?);
                    }
                    if let Some(s) = &sq.step_expr {
                        sq.step = Some(Duration::from_secs_f64(duration_of(
                            s, dstep, range_s, false,
                        )?));
                    }
                    stack.push(&mut sq.expr);
                }
                other => stack.extend(other.children_mut()),
            }
        }
        Ok(())
    }
}

fn resolve_offset(
    e: Option<&DurationExpr>,
    offset: &mut Option<Offset>,
    step: f64,
    range: f64,
) -> Result<(), String> {
    if let Some(e) = e {
        *offset = Some(Offset::from_secs(duration_of(e, step, range, true)?));
    }
    Ok(())
}

/// Whether `op` is one of the aggregations that take a parameter.
pub fn takes_param(op: TokenId) -> bool {
    matches!(
        op,
        token::T_TOPK
            | token::T_BOTTOMK
            | token::T_QUANTILE
            | token::T_COUNT_VALUES
            | token::T_LIMITK
            | token::T_LIMIT_RATIO
    )
}
