//! Expressions written back as text, as Prometheus writes them
//! (`printer.go`): one line from `Display`, or split over lines past 100
//! characters by [`Expr::prettify`] (`prettier.go`).

use std::fmt::{self, Write};
use std::time::UNIX_EPOCH;

use super::ast::*;
use super::label::Matcher;
use super::text::duration_secs;
pub use super::text::{duration, number, quote};
use super::token::text;

fn legacy_label(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c == b'_' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
}

fn legacy_metric(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c == b'_' || c == b':' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c == b':' || c.is_ascii_alphanumeric())
}

/// A label name, quoted when it is not a legacy name.
pub fn label_name(s: &str) -> String {
    if legacy_label(s) {
        s.to_owned()
    } else {
        quote(s)
    }
}

fn labels_list(l: &Labels) -> String {
    l.labels
        .iter()
        .map(|n| label_name(n))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            label_name(&self.name),
            self.op.text(),
            quote(&self.value)
        )
    }
}

impl fmt::Display for DurationExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationExpr::Number(v, true) if *v < 0.0 => write!(f, "-{}", duration_secs(-v)),
            DurationExpr::Number(v, true) => f.write_str(&duration_secs(*v)),
            DurationExpr::Number(v, false) => f.write_str(&number(*v)),
            DurationExpr::Step => f.write_str("step()"),
            DurationExpr::Range => f.write_str("range()"),
            DurationExpr::MinOf(a, b) => write!(f, "min_of({a}, {b})"),
            DurationExpr::MaxOf(a, b) => write!(f, "max_of({a}, {b})"),
            DurationExpr::Unary(true, x) => write!(f, "-{x}"),
            DurationExpr::Unary(false, x) => write!(f, "{x}"),
            DurationExpr::Binary(op, a, b) => write!(f, "{a} {} {b}", text(*op)),
            DurationExpr::Paren(x) => write!(f, "({x})"),
        }
    }
}

fn offset_str(offset: &Option<Offset>, expr: &Option<DurationExpr>) -> String {
    match (expr, offset) {
        (Some(e), _) => format!(" offset {e}"),
        (None, Some(Offset::Pos(d))) if !d.is_zero() => {
            format!(" offset {}", duration(d.as_millis() as i64))
        }
        (None, Some(Offset::Neg(d))) if !d.is_zero() => {
            format!(" offset -{}", duration(d.as_millis() as i64))
        }
        _ => String::new(),
    }
}

fn at_str(at: &Option<AtModifier>) -> String {
    match at {
        Some(AtModifier::Start) => " @ start()".into(),
        Some(AtModifier::End) => " @ end()".into(),
        Some(AtModifier::At(t)) => {
            let ms = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => d.as_millis() as f64,
                Err(e) => -(e.duration().as_millis() as f64),
            };
            format!(" @ {:.3}", ms / 1000.0)
        }
        None => String::new(),
    }
}

fn extended(vs: &VectorSelector) -> &'static str {
    if vs.anchored {
        " anchored"
    } else if vs.smoothed {
        " smoothed"
    } else {
        ""
    }
}

/// `name{matchers}` without modifiers.
fn selector_core(vs: &VectorSelector) -> String {
    let mut matchers: Vec<String> = vs.matchers.matchers.iter().map(|m| m.to_string()).collect();
    let mut out = String::new();
    match &vs.name {
        Some(n) if legacy_metric(n) => out.push_str(n),
        Some(n) => matchers.push(quote(n)),
        None => {}
    }
    if !matchers.is_empty() {
        matchers.sort();
        out.push('{');
        out.push_str(&matchers.join(","));
        out.push('}');
    }
    out
}

impl fmt::Display for VectorSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}{}",
            selector_core(self),
            at_str(&self.at),
            extended(self),
            offset_str(&self.offset, &self.offset_expr)
        )
    }
}

fn range_str(range: &std::time::Duration, expr: &Option<DurationExpr>) -> String {
    match expr {
        Some(e) => e.to_string(),
        None => duration(range.as_millis() as i64),
    }
}

impl fmt::Display for MatrixSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}]{}{}{}",
            selector_core(&self.vs),
            range_str(&self.range, &self.range_expr),
            extended(&self.vs),
            at_str(&self.vs.at),
            offset_str(&self.vs.offset, &self.vs.offset_expr)
        )
    }
}

fn subquery_suffix(sq: &SubqueryExpr) -> String {
    let step = match (&sq.step_expr, &sq.step) {
        (Some(e), _) => e.to_string(),
        (None, Some(s)) if !s.is_zero() => duration(s.as_millis() as i64),
        _ => String::new(),
    };
    format!(
        "[{}:{}]{}{}",
        range_str(&sq.range, &sq.range_expr),
        step,
        at_str(&sq.at),
        offset_str(&sq.offset, &sq.offset_expr)
    )
}

fn agg_op_str(a: &AggregateExpr) -> String {
    let mut s = a.op.to_string();
    match &a.modifier {
        Some(LabelModifier::Exclude(l)) => {
            let _ = write!(s, " without ({}) ", labels_list(l));
        }
        Some(LabelModifier::Include(l)) if !l.is_empty() => {
            let _ = write!(s, " by ({}) ", labels_list(l));
        }
        _ => {}
    }
    s
}

fn matching_str(b: &BinaryExpr) -> String {
    let mut s = String::new();
    let Some(m) = &b.modifier else {
        return s;
    };
    if m.return_bool {
        s.push_str(" bool");
    }
    if let Some(matching) = &m.matching {
        let tag = if matching.is_include() {
            "on"
        } else {
            "ignoring"
        };
        // `ignoring ()` is printed only to carry a `group_*` clause.
        let grouped = !matches!(
            m.card,
            VectorMatchCardinality::OneToOne | VectorMatchCardinality::ManyToMany
        );
        if matching.is_include() || !matching.labels().is_empty() || grouped {
            let _ = write!(s, " {tag} ({})", labels_list(matching.labels()));
            match &m.card {
                VectorMatchCardinality::ManyToOne(l) => {
                    let _ = write!(s, " group_left ({})", labels_list(l));
                }
                VectorMatchCardinality::OneToMany(l) => {
                    let _ = write!(s, " group_right ({})", labels_list(l));
                }
                _ => {}
            }
        }
    }
    // Fill values as Go's `%v` writes a float (`1e+06`).
    let fv = m.fill_values;
    let g = crate::histogram::go_g;
    match (fv.lhs, fv.rhs) {
        (Some(l), Some(r)) if l == r => {
            let _ = write!(s, " fill ({})", g(l));
        }
        (l, r) => {
            if let Some(l) = l {
                let _ = write!(s, " fill_left ({})", g(l));
            }
            if let Some(r) = r {
                let _ = write!(s, " fill_right ({})", g(r));
            }
        }
    }
    s
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Aggregate(a) => {
                f.write_str(&agg_op_str(a))?;
                f.write_str("(")?;
                if let Some(p) = &a.param {
                    write!(f, "{p}, ")?;
                }
                write!(f, "{})", a.expr)
            }
            Expr::Unary(u) => write!(f, "-{}", u.expr),
            Expr::Binary(b) => write!(f, "{} {}{} {}", b.lhs, b.op, matching_str(b), b.rhs),
            Expr::Paren(p) => write!(f, "({})", p.expr),
            Expr::Subquery(sq) => write!(f, "{}{}", sq.expr, subquery_suffix(sq)),
            Expr::NumberLiteral(n) if n.duration && n.val < 0.0 => {
                write!(f, "-{}", duration_secs(-n.val))
            }
            Expr::NumberLiteral(n) if n.duration => f.write_str(&duration_secs(n.val)),
            Expr::NumberLiteral(n) => f.write_str(&number(n.val)),
            Expr::StringLiteral(s) => f.write_str(&s.go_quoted()),
            Expr::VectorSelector(vs) => write!(f, "{vs}"),
            Expr::MatrixSelector(m) => write!(f, "{m}"),
            Expr::Call(c) => {
                write!(f, "{}(", c.func.name)?;
                for (i, a) in c.args.args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

const MAX_LINE: usize = 100;

fn indent(level: usize) -> String {
    "  ".repeat(level)
}

impl Expr {
    /// The expression over several lines, indented, where one line would
    /// pass 100 characters (Prometheus' `format_query`).
    pub fn prettify(&self) -> String {
        self.pretty(0)
    }

    fn pretty(&self, level: usize) -> String {
        let one = self.to_string();
        if one.len() <= MAX_LINE {
            return format!("{}{one}", indent(level));
        }
        let ind = indent(level);
        match self {
            Expr::Aggregate(a) => {
                let mut s = format!("{ind}{}(\n", agg_op_str(a));
                if let Some(p) = &a.param {
                    let _ = writeln!(s, "{},", p.pretty(level + 1));
                }
                let _ = write!(s, "{}\n{ind})", a.expr.pretty(level + 1));
                s
            }
            Expr::Binary(b) => format!(
                "{}\n{ind}{}{}\n{}",
                b.lhs.pretty(level + 1),
                b.op,
                matching_str(b),
                b.rhs.pretty(level + 1)
            ),
            Expr::Call(c) => {
                let args: Vec<String> = c.args.args.iter().map(|a| a.pretty(level + 1)).collect();
                format!("{ind}{}(\n{}\n{ind})", c.func.name, args.join(",\n"))
            }
            Expr::Paren(p) => format!("{ind}(\n{}\n{ind})", p.expr.pretty(level + 1)),
            Expr::Subquery(sq) => format!("{}{}", sq.expr.pretty(level), subquery_suffix(sq)),
            Expr::Unary(u) => format!("{ind}-{}", u.expr.pretty(level).trim_start()),
            _ => format!("{ind}{one}"),
        }
    }
}
