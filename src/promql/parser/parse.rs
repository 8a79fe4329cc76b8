//! A precedence-climbing parser over the tokens of [`super::lex`].
//!
//! Binary operators bind as in Prometheus' grammar, loosest first: `or`;
//! `and`, `unless`; comparisons and the trim operators `</` `>/`; `+ -`;
//! `* / % atan2`; `^` (right-associative). A unary sign binds like `*`,
//! so `-a ^ b` is `-(a ^ b)`. The postfix modifiers (`[…]`, `offset`, `@`,
//! `anchored`, `smoothed`) bind tightest.
//!
//! Nesting recurses; the guard bounds a query's depth before it gets here.
//! Every type rule of Prometheus' `checkAST` is checked as the node is
//! built, with Prometheus' messages.

use std::time::{Duration, UNIX_EPOCH};

use super::ast::*;
use super::function;
use super::label::{MatchOp, Matcher, Matchers};
use super::lex::{lex, Spanned, Tok};
use super::options::{Options, ParseError, MAX_DURATION_SECS};
use super::token::*;
use super::value::ValueType;

/// Parses `input` with the features `opts` enables.
pub fn parse(input: &str, opts: &Options) -> Result<Expr, ParseError> {
    let toks = lex(input).map_err(|e| ParseError::new(input, e.start, e.end, e.msg))?;
    let mut p = Parser {
        input,
        toks,
        at: 0,
        opts,
        regexes: std::collections::HashMap::new(),
    };
    if p.peek() == &Tok::Eof {
        return Err(p.error_at(0, 0, "no expression found in input"));
    }
    let e = p.expr(0)?;
    if p.peek() != &Tok::Eof {
        return Err(p.unexpected("", ""));
    }
    Ok(e)
}

struct Parser<'a> {
    input: &'a str,
    toks: Vec<Spanned>,
    at: usize,
    opts: &'a Options,
    /// Regex matchers compiled so far, by operator and pattern.
    regexes: std::collections::HashMap<(MatchOp, String), crate::storage::index::Matcher>,
}

/// The binding strength of a binary operator; higher binds tighter.
fn precedence(op: TokenId) -> u8 {
    match op {
        T_LOR => 1,
        T_LAND | T_LUNLESS => 2,
        T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE | T_TRIM_UPPER | T_TRIM_LOWER => 3,
        T_ADD | T_SUB => 4,
        T_MUL | T_DIV | T_MOD | T_ATAN2 => 5,
        _ => 6,
    }
}

const PREC_POW: u8 = 6;

fn is_keyword(word: &str, kw: &str) -> bool {
    word.eq_ignore_ascii_case(kw)
}

impl<'a> Parser<'a> {
    fn peek(&self) -> &Tok {
        &self.toks[self.at].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.at + k).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> (usize, usize) {
        let t = &self.toks[self.at];
        (t.start, t.end)
    }

    fn next(&mut self) -> Spanned {
        let t = self.toks[self.at].clone();
        if self.at + 1 < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn error_at(&self, start: usize, end: usize, msg: impl Into<String>) -> ParseError {
        ParseError::new(self.input, start, end, msg.into())
    }

    fn error(&self, msg: impl Into<String>) -> ParseError {
        let (s, e) = self.span();
        self.error_at(s, e, msg)
    }

    /// Prometheus' "unexpected <token>[ in <context>][, expected <what>]".
    fn unexpected(&self, context: &str, expected: &str) -> ParseError {
        let mut msg = format!("unexpected {}", self.peek().describe());
        if !context.is_empty() {
            msg.push_str(" in ");
            msg.push_str(context);
        }
        if !expected.is_empty() {
            msg.push_str(", expected ");
            msg.push_str(expected);
        }
        self.error(msg)
    }

    fn expect(&mut self, tok: Tok, context: &str) -> Result<Spanned, ParseError> {
        if *self.peek() == tok {
            Ok(self.next())
        } else {
            Err(self.unexpected(context, &tok.describe()))
        }
    }

    /// The keyword `kw` next (case-insensitive)?
    fn at_keyword(&self, kw: &str) -> bool {
        matches!(self.peek(), Tok::Ident(w) if is_keyword(w, kw))
    }

    /// The binary operator next, if one is.
    fn binary_op(&self) -> Option<TokenId> {
        match self.peek() {
            Tok::Op(op) => Some(*op),
            Tok::Ident(w) => [
                ("and", T_LAND),
                ("or", T_LOR),
                ("unless", T_LUNLESS),
                ("atan2", T_ATAN2),
            ]
            .iter()
            .find(|(k, _)| is_keyword(w, k))
            .map(|(_, op)| *op),
            _ => None,
        }
    }

    fn expr(&mut self, min_prec: u8) -> Result<Expr, ParseError> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.binary_op() {
            let prec = precedence(op);
            if prec < min_prec {
                break;
            }
            let (op_start, op_end) = self.span();
            self.next();
            let modifier = self.bin_modifiers()?;
            let next_min = if op == T_POW { prec } else { prec + 1 };
            let rhs = self.expr(next_min)?;
            lhs = self.binary(lhs, op, modifier, rhs, (op_start, op_end))?;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if let Tok::Op(op @ (T_ADD | T_SUB)) = *self.peek() {
            let (start, end) = self.span();
            self.next();
            let operand = self.expr(PREC_POW)?;
            let t = operand.value_type();
            if t != ValueType::Scalar && t != ValueType::Vector {
                return Err(self.error_at(
                    start,
                    end,
                    format!(
                        "unary expression only allowed on expressions of type scalar or instant vector, got {:?}",
                        t.documented()
                    ),
                ));
            }
            return Ok(match (op, operand) {
                (T_SUB, Expr::NumberLiteral(n)) => Expr::NumberLiteral(NumberLiteral {
                    pos: Pos::at(start),
                    val: -n.val,
                    duration: n.duration,
                }),
                (T_SUB, e) => Expr::Unary(UnaryExpr {
                    pos: Pos::at(start),
                    expr: Box::new(e),
                }),
                // `+5` starts at its sign, as Prometheus places it.
                (_, Expr::NumberLiteral(n)) => Expr::NumberLiteral(NumberLiteral {
                    pos: Pos::at(start),
                    ..n
                }),
                (_, e) => e,
            });
        }
        let e = self.primary()?;
        self.postfix(e)
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let (start, end) = self.span();
        match self.peek().clone() {
            Tok::LParen => {
                self.next();
                let e = self.expr(0)?;
                self.expect(Tok::RParen, "paren expression")?;
                Ok(Expr::Paren(ParenExpr {
                    pos: Pos::at(start),
                    expr: Box::new(e),
                }))
            }
            Tok::LBrace => {
                let matchers = self.matchers()?;
                self.selector(None, matchers, start)
            }
            Tok::Number(v) => {
                self.next();
                Ok(Expr::NumberLiteral(NumberLiteral {
                    pos: Pos::at(start),
                    val: v,
                    duration: false,
                }))
            }
            Tok::Duration(v) => {
                self.next();
                Ok(Expr::NumberLiteral(NumberLiteral {
                    pos: Pos::at(start),
                    val: v,
                    duration: true,
                }))
            }
            Tok::Str(val, raw) => {
                self.next();
                Ok(Expr::StringLiteral(StringLiteral {
                    pos: Pos::at(start),
                    val,
                    raw,
                }))
            }
            Tok::Ident(word) => {
                let followed_by_paren = *self.peek_at(1) == Tok::LParen;
                if let Some(op) = aggregation(&word) {
                    let grouping = matches!(self.peek_at(1), Tok::Ident(w) if is_keyword(w, "by") || is_keyword(w, "without"));
                    if followed_by_paren || grouping {
                        return self.aggregation(op, start);
                    }
                }
                if followed_by_paren {
                    return self.call(&word, start, end);
                }
                self.next();
                let matchers = if *self.peek() == Tok::LBrace {
                    self.matchers()?
                } else {
                    Matchers::default()
                };
                self.selector(Some(word), matchers, start)
            }
            Tok::Eof => Err(self.error("unexpected end of input")),
            _ => Err(self.unexpected("", "")),
        }
    }

    /// `{a="b", …}`.
    fn matchers(&mut self) -> Result<Matchers, ParseError> {
        self.expect(Tok::LBrace, "label matching")?;
        let mut out = Vec::new();
        loop {
            if *self.peek() == Tok::RBrace {
                self.next();
                break;
            }
            let (start, _) = self.span();
            let name = match self.next().tok {
                Tok::Ident(w) if !w.contains(':') => w,
                Tok::Str(s, _) => {
                    // A quoted name alone is the metric name.
                    if matches!(self.peek(), Tok::Comma | Tok::RBrace) {
                        let m = Matcher::new(MatchOp::Equal, "__name__".into(), s)
                            .map_err(|e| self.error_at(start, start, e))?;
                        out.push(m);
                        if *self.peek() == Tok::Comma {
                            self.next();
                        }
                        continue;
                    }
                    s
                }
                _ => {
                    self.at -= 1;
                    return Err(self.unexpected("label matching", "identifier or \"}\""));
                }
            };
            let op = match self.peek() {
                Tok::Assign => MatchOp::Equal,
                Tok::Op(T_NEQ) => MatchOp::NotEqual,
                Tok::EqRegex => MatchOp::Re,
                Tok::NeqRegex => MatchOp::NotRe,
                _ => return Err(self.unexpected("label matching", "label matching operator")),
            };
            self.next();
            let (value, end) = match self.peek().clone() {
                Tok::Str(s, _) => (s, self.next().end),
                _ => return Err(self.unexpected("label matching", "string")),
            };
            // A pattern used again is compiled once per query.
            let m = match self.regexes.get(&(op, value.clone())) {
                Some(done) => {
                    let mut compiled = done.clone();
                    compiled.name.clone_from(&name);
                    Matcher {
                        op,
                        name,
                        value,
                        compiled,
                    }
                }
                None => {
                    let m =
                        Matcher::new(op, name, value).map_err(|e| self.error_at(start, end, e))?;
                    if matches!(op, MatchOp::Re | MatchOp::NotRe) {
                        self.regexes
                            .insert((op, m.value.clone()), m.compiled.clone());
                    }
                    m
                }
            };
            out.push(m);
            match self.peek() {
                Tok::Comma => {
                    self.next();
                }
                Tok::RBrace => {}
                _ => return Err(self.unexpected("label matching", "\",\" or \"}\"")),
            }
        }
        Ok(Matchers { matchers: out })
    }

    fn selector(
        &mut self,
        name: Option<String>,
        matchers: Matchers,
        start: usize,
    ) -> Result<Expr, ParseError> {
        let end = self.toks[self.at.saturating_sub(1)].end;
        if let Some(n) = &name {
            if let Some(m) = matchers.matchers.iter().find(|m| m.name == "__name__") {
                return Err(self.error_at(
                    start,
                    end,
                    format!("metric name must not be set twice: {n:?} or {:?}", m.value),
                ));
            }
        }
        Ok(Expr::VectorSelector(VectorSelector::new(
            name,
            matchers,
            Pos::at(start),
        )))
    }

    /// `(a, b)` or `a, b` of a grouping clause: `(` is next.
    fn grouping_labels(&mut self) -> Result<Labels, ParseError> {
        self.expect(Tok::LParen, "grouping opts")?;
        let mut out = Vec::new();
        loop {
            match self.peek().clone() {
                Tok::RParen => {
                    self.next();
                    break;
                }
                Tok::Ident(w) => {
                    self.next();
                    out.push(w);
                }
                Tok::Str(s, raw) => {
                    if raw.is_some() || s.is_empty() {
                        return Err(self.error(format!("invalid label name for grouping: {s:?}")));
                    }
                    self.next();
                    out.push(s);
                }
                _ => return Err(self.unexpected("grouping opts", "label")),
            }
            match self.peek() {
                Tok::Comma => {
                    self.next();
                }
                Tok::RParen => {}
                _ => return Err(self.unexpected("grouping opts", "\",\" or \")\"")),
            }
        }
        Ok(Labels::new(out))
    }

    fn aggregation(&mut self, op: TokenId, start: usize) -> Result<Expr, ParseError> {
        self.next();
        let grouping = |p: &mut Self| -> Result<Option<LabelModifier>, ParseError> {
            if p.at_keyword("by") {
                p.next();
                Ok(Some(LabelModifier::Include(p.grouping_labels()?)))
            } else if p.at_keyword("without") {
                p.next();
                Ok(Some(LabelModifier::Exclude(p.grouping_labels()?)))
            } else {
                Ok(None)
            }
        };
        let mut modifier = grouping(self)?;
        if *self.peek() != Tok::LParen {
            return Err(self.unexpected("aggregation", "\"(\""));
        }
        let mut args = self.call_args()?;
        let end = self.toks[self.at - 1].end;
        if modifier.is_none() {
            modifier = grouping(self)?;
        }
        // `by ()` groups as no clause does.
        if matches!(&modifier, Some(LabelModifier::Include(l)) if l.is_empty()) {
            modifier = None;
        }
        if args.is_empty() {
            return Err(self.error_at(
                start,
                end,
                "no arguments for aggregate expression provided",
            ));
        }
        let with_param = takes_param(op);
        if with_param
            && !self.opts.experimental_functions
            && (op == T_LIMITK || op == T_LIMIT_RATIO)
        {
            return Err(self.error_at(
                start,
                end,
                format!(
                    "{}() is experimental and must be enabled with --enable-feature=promql-experimental-functions",
                    text(op)
                ),
            ));
        }
        let want = if with_param { 2 } else { 1 };
        if args.len() != want {
            return Err(self.error_at(
                start,
                end,
                format!(
                    "wrong number of arguments for aggregate expression provided, expected {want}, got {}",
                    args.len()
                ),
            ));
        }
        let expr = Box::new(args.pop().unwrap_or(Expr::NumberLiteral(NumberLiteral {
            pos: Pos::at(start),
            val: 0.0,
            duration: false,
        })));
        let param = args.pop().map(Box::new);
        self.expect_type(
            &expr,
            ValueType::Vector,
            "aggregation expression",
            (start, end),
        )?;
        if let Some(p) = &param {
            let want = if op == T_COUNT_VALUES {
                ValueType::String
            } else {
                ValueType::Scalar
            };
            self.expect_type(p, want, "aggregation parameter", (start, end))?;
        }
        Ok(Expr::Aggregate(AggregateExpr {
            pos: Pos::at(start),
            op: TokenType::new(op),
            expr,
            param,
            modifier,
        }))
    }

    /// A `-` (`Some(true)`) or `+` (`Some(false)`) next, taken.
    fn sign(&mut self) -> Option<bool> {
        let neg = match self.peek() {
            Tok::Op(T_SUB) => true,
            Tok::Op(T_ADD) => false,
            _ => return None,
        };
        self.next();
        Some(neg)
    }

    /// Prometheus' `expectType`: "expected type X in <context>, got Y".
    fn expect_type(
        &self,
        e: &Expr,
        want: ValueType,
        context: &str,
        (start, end): (usize, usize),
    ) -> Result<(), ParseError> {
        let got = e.value_type();
        if got == want {
            return Ok(());
        }
        Err(self.error_at(
            start,
            end,
            format!(
                "expected type {} in {context}, got {}",
                want.documented(),
                got.documented()
            ),
        ))
    }

    /// `(a, b, …)`: `(` is next.
    fn call_args(&mut self) -> Result<Vec<Expr>, ParseError> {
        self.expect(Tok::LParen, "function call")?;
        let mut args = Vec::new();
        if *self.peek() == Tok::RParen {
            self.next();
            return Ok(args);
        }
        loop {
            args.push(self.expr(0)?);
            match self.peek() {
                Tok::Comma => {
                    self.next();
                    if *self.peek() == Tok::RParen {
                        return Err(self.error("trailing commas not allowed in function call args"));
                    }
                }
                Tok::RParen => {
                    self.next();
                    return Ok(args);
                }
                _ => return Err(self.unexpected("function call", "\",\" or \")\"")),
            }
        }
    }

    fn call(&mut self, name: &str, start: usize, name_end: usize) -> Result<Expr, ParseError> {
        let Some(func) = function::get(name) else {
            return Err(self.error_at(
                start,
                name_end,
                format!("unknown function with name {name:?}"),
            ));
        };
        if func.experimental && !self.opts.experimental_functions {
            return Err(self.error_at(
                start,
                name_end,
                format!("function {name:?} is not enabled"),
            ));
        }
        self.next();
        let mut args = self.call_args()?;
        let end = self.toks[self.at - 1].end;
        let nargs = func.arg_types.len();
        let got = args.len();
        if func.variadic == 0 {
            if nargs != got {
                return Err(self.error_at(
                    start,
                    end,
                    format!("expected {nargs} argument(s) in call to {name:?}, got {got}"),
                ));
            }
        } else {
            let min = nargs - 1;
            if min > got {
                return Err(self.error_at(
                    start,
                    end,
                    format!("expected at least {min} argument(s) in call to {name:?}, got {got}"),
                ));
            }
            if func.variadic > 0
                && min + func.variadic as usize > 0
                && got > min + func.variadic as usize
            {
                return Err(self.error_at(
                    start,
                    end,
                    format!(
                        "expected at most {} argument(s) in call to {name:?}, got {got}",
                        min + func.variadic as usize
                    ),
                ));
            }
        }
        if func.name == "info" && args.len() > 1 {
            if args[1].value_type() != ValueType::Vector {
                return Err(self.error_at(
                    start,
                    end,
                    format!(
                        "expected type instant vector in call to function \"info\", got {}",
                        args[1].value_type().documented()
                    ),
                ));
            }
            match &mut args[1] {
                Expr::VectorSelector(vs) if vs.name.is_some() => {
                    return Err(self.error_at(
                        start,
                        end,
                        "expected label selectors only, got vector selector instead",
                    ))
                }
                Expr::VectorSelector(vs) => vs.bypass_empty_matcher_check = true,
                _ => return Err(self.error_at(start, end, "expected label selectors only")),
            }
        }
        for (i, a) in args.iter().enumerate() {
            let i = if i >= nargs {
                if func.variadic == 0 {
                    break;
                }
                nargs - 1
            } else {
                i
            };
            let context = format!("call to function {name:?}");
            self.expect_type(a, func.arg_types[i], &context, (start, end))?;
        }
        Ok(Expr::Call(Call {
            pos: Pos::at(start),
            func,
            args: FunctionArgs { args },
        }))
    }

    /// `bool`, `on (…)`/`ignoring (…)`, `group_left (…)`/`group_right (…)`
    /// and the fill modifiers after a binary operator.
    fn bin_modifiers(&mut self) -> Result<BinModifier, ParseError> {
        let mut m = BinModifier::default();
        if self.at_keyword("bool") {
            self.next();
            m.return_bool = true;
        }
        if self.at_keyword("on") || self.at_keyword("ignoring") {
            let on = self.at_keyword("on");
            self.next();
            let labels = self.grouping_labels()?;
            m.matching = Some(if on {
                LabelModifier::Include(labels)
            } else {
                LabelModifier::Exclude(labels)
            });
            if self.at_keyword("group_left") || self.at_keyword("group_right") {
                let left = self.at_keyword("group_left");
                self.next();
                let include = if *self.peek() == Tok::LParen {
                    self.grouping_labels()?
                } else {
                    Labels::default()
                };
                m.card = if left {
                    VectorMatchCardinality::ManyToOne(include)
                } else {
                    VectorMatchCardinality::OneToMany(include)
                };
            }
        }
        // `ignoring ()` alone matches as no clause does.
        if m.card == VectorMatchCardinality::OneToOne
            && matches!(&m.matching, Some(LabelModifier::Exclude(l)) if l.is_empty())
        {
            m.matching = None;
        }
        let (fill_start, _) = self.span();
        let mut seen = (false, false);
        loop {
            let (both, left) = if self.at_keyword("fill") {
                (true, false)
            } else if self.at_keyword("fill_left") {
                (false, true)
            } else if self.at_keyword("fill_right") {
                (false, false)
            } else {
                break;
            };
            if *self.peek_at(1) != Tok::LParen {
                break;
            }
            let repeated = if both {
                seen.0 || seen.1
            } else if left {
                seen.0
            } else {
                seen.1
            };
            if repeated {
                return Err(self.unexpected("binary expression", ""));
            }
            self.next();
            self.next();
            let neg = self.sign() == Some(true);
            let v = match self.next().tok {
                Tok::Number(v) | Tok::Duration(v) => {
                    if neg {
                        -v
                    } else {
                        v
                    }
                }
                _ => {
                    self.at -= 1;
                    return Err(self.unexpected("fill modifier", "number"));
                }
            };
            self.expect(Tok::RParen, "fill modifier")?;
            if both {
                m.fill_values = VectorMatchFillValues {
                    lhs: Some(v),
                    rhs: Some(v),
                };
                break;
            } else if left {
                m.fill_values.lhs = Some(v);
                seen.0 = true;
            } else {
                m.fill_values.rhs = Some(v);
                seen.1 = true;
            }
        }
        if m.fill_values.any() && !self.opts.binop_fill_modifiers {
            let (_, end) = self.span();
            return Err(self.error_at(
                fill_start,
                end,
                "binop fill modifiers are experimental and not enabled",
            ));
        }
        Ok(m)
    }

    fn binary(
        &self,
        lhs: Expr,
        op: TokenId,
        mut m: BinModifier,
        rhs: Expr,
        (op_start, op_end): (usize, usize),
    ) -> Result<Expr, ParseError> {
        let err = |msg: String| Err(self.error_at(op_start, op_end, msg));
        let (lt, rt) = (lhs.value_type(), rhs.value_type());
        if m.return_bool && !is_comparison(op) {
            return err("bool modifier can only be used on comparison operators".into());
        }
        if is_comparison(op) && !m.return_bool && lt == ValueType::Scalar && rt == ValueType::Scalar
        {
            return err("comparisons between scalars must use BOOL modifier".into());
        }
        if is_set_operator(op) && m.card == VectorMatchCardinality::OneToOne {
            m.card = VectorMatchCardinality::ManyToMany;
        }
        if let (Some(LabelModifier::Include(on)), Some(include)) = (&m.matching, m.card.labels()) {
            if let Some(l) = on.labels.iter().find(|l| include.labels.contains(l)) {
                return err(format!(
                    "label {l:?} must not occur in ON and GROUP clause at once"
                ));
            }
        }
        for t in [lt, rt] {
            if t != ValueType::Scalar && t != ValueType::Vector {
                return err(
                    "binary expression must contain only scalar and instant vector types".into(),
                );
            }
        }
        if lt != ValueType::Vector || rt != ValueType::Vector {
            if m.matching.as_ref().is_some_and(|l| !l.labels().is_empty()) {
                return err("vector matching only allowed between instant vectors".into());
            }
            if m.fill_values.any() {
                return err(
                    "filling in missing series only allowed between instant vectors".into(),
                );
            }
            if is_set_operator(op) {
                return err(format!(
                    "set operator {:?} not allowed in binary scalar expression",
                    text(op)
                ));
            }
            m.matching = None;
            m.card = VectorMatchCardinality::OneToOne;
        } else if is_set_operator(op) {
            if matches!(
                m.card,
                VectorMatchCardinality::ManyToOne(_) | VectorMatchCardinality::OneToMany(_)
            ) {
                return err(format!("no grouping allowed for {:?} operation", text(op)));
            }
            if m.fill_values.any() {
                return err("filling in missing series not allowed for set operators".into());
            }
        }
        Ok(Expr::Binary(BinaryExpr {
            op: TokenType::new(op),
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
            modifier: Some(m),
        }))
    }

    /// `[…]`, `offset …`, `@ …`, `anchored`, `smoothed` after `e`.
    fn postfix(&mut self, mut e: Expr) -> Result<Expr, ParseError> {
        loop {
            let (start, end) = self.span();
            if *self.peek() == Tok::LBracket {
                e = self.range_or_subquery(e)?;
            } else if self.at_keyword("offset") {
                self.next();
                let (value, expr) = self.offset_duration()?;
                set_offset(&mut e, value, expr).map_err(|m| self.error_at(start, end, m))?;
            } else if *self.peek() == Tok::At {
                self.next();
                let at = self.at_value()?;
                set_at(&mut e, at).map_err(|m| self.error_at(start, end, m))?;
            } else if self.at_keyword("anchored") || self.at_keyword("smoothed") {
                let anchored = self.at_keyword("anchored");
                let word = if anchored { "anchored" } else { "smoothed" };
                if !self.opts.extended_range_selectors {
                    return Err(
                        self.error(format!("{word} modifier is experimental and not enabled"))
                    );
                }
                self.next();
                let vs = match &mut e {
                    Expr::VectorSelector(vs) => vs,
                    Expr::MatrixSelector(m) => &mut m.vs,
                    Expr::Subquery(_) => {
                        return Err(self.error_at(
                            start,
                            end,
                            format!("{word} modifier is not supported for subqueries"),
                        ))
                    }
                    _ => {
                        return Err(self.error_at(
                            start,
                            end,
                            format!("{word} modifier not implemented"),
                        ))
                    }
                };
                if anchored {
                    vs.anchored = true;
                } else {
                    vs.smoothed = true;
                }
                if vs.anchored && vs.smoothed {
                    return Err(self.error_at(
                        start,
                        end,
                        "anchored and smoothed modifiers cannot be used together",
                    ));
                }
            } else {
                break;
            }
        }
        Ok(e)
    }

    fn range_or_subquery(&mut self, e: Expr) -> Result<Expr, ParseError> {
        let (bstart, _) = self.span();
        self.next();
        let (range, range_expr) = self.positive_duration("subquery or range selector")?;
        if *self.peek() == Tok::Colon {
            self.next();
            let (step, step_expr) = if *self.peek() == Tok::RBracket {
                (None, None)
            } else {
                let (s, se) = self.positive_duration("subquery selector")?;
                (Some(s), se)
            };
            if *self.peek() != Tok::RBracket {
                return Err(self.unexpected("subquery selector", "\"]\""));
            }
            self.next();
            if e.value_type() != ValueType::Vector {
                return Err(self.error_at(
                    bstart,
                    self.toks[self.at - 1].end,
                    format!(
                        "subquery is only allowed on instant vector, got {} instead",
                        e.value_type()
                    ),
                ));
            }
            return Ok(Expr::Subquery(SubqueryExpr {
                expr: Box::new(e),
                offset: None,
                offset_expr: None,
                at: None,
                range: secs(range),
                range_expr,
                step: step.map(secs),
                step_expr,
            }));
        }
        if *self.peek() != Tok::RBracket {
            return Err(self.unexpected("subquery or range", "\":\" or \"]\""));
        }
        let end = self.next().end;
        let vs = match e {
            Expr::VectorSelector(vs) => vs,
            _ => {
                return Err(self.error_at(bstart, end, "ranges only allowed for vector selectors"))
            }
        };
        if vs.offset.is_some() || vs.offset_expr.is_some() {
            return Err(self.error_at(bstart, end, "no offset modifiers allowed before range"));
        }
        if vs.at.is_some() {
            return Err(self.error_at(bstart, end, "no @ modifiers allowed before range"));
        }
        Ok(Expr::MatrixSelector(MatrixSelector {
            vs,
            range: secs(range),
            range_expr,
        }))
    }

    /// A range or step: a literal (> 0), or a duration expression. Returns
    /// the literal's seconds, or 0 and the expression.
    fn positive_duration(
        &mut self,
        context: &str,
    ) -> Result<(f64, Option<DurationExpr>), ParseError> {
        let (start, _) = self.span();
        if !matches!(
            self.peek(),
            Tok::Number(_)
                | Tok::Duration(_)
                | Tok::LParen
                | Tok::Op(T_ADD | T_SUB)
                | Tok::Ident(_)
        ) {
            return Err(self.unexpected(context, "number, duration, step(), or range()"));
        }
        let d = self.duration_expr(0)?;
        let end = self.toks[self.at - 1].end;
        self.literal_or_expr(d, start, end, false)
    }

    /// A literal's seconds, checked; or an expression kept for later (when
    /// duration expressions are enabled).
    fn literal_or_expr(
        &self,
        d: DurationExpr,
        start: usize,
        end: usize,
        negative_allowed: bool,
    ) -> Result<(f64, Option<DurationExpr>), ParseError> {
        // A sign on a number is folded into it, as Prometheus folds it.
        let literal = match &d {
            DurationExpr::Number(v, _) => Some(*v),
            DurationExpr::Unary(neg, x) => match x.as_ref() {
                DurationExpr::Number(v, _) => Some(if *neg { -v } else { *v }),
                _ => None,
            },
            _ => None,
        };
        match literal {
            Some(v) => {
                if !v.is_finite() || v.abs() > MAX_DURATION_SECS {
                    return Err(self.error_at(start, end, "duration out of range"));
                }
                if v <= 0.0 && !negative_allowed {
                    return Err(self.error_at(start, end, "duration must be greater than 0"));
                }
                Ok((v, None))
            }
            None => {
                if !self.opts.duration_expr {
                    return Err(self.error_at(
                        start,
                        end,
                        "experimental duration expression is not enabled: enable it with --enable-feature=promql-duration-expr",
                    ));
                }
                // Division and modulo by a literal zero fail now, as in
                // Prometheus; the rest when the step and range are known.
                check_zero_divisors(&d).map_err(|m| self.error_at(start, end, m))?;
                Ok((0.0, Some(d)))
            }
        }
    }

    fn duration_expr(&mut self, min_prec: u8) -> Result<DurationExpr, ParseError> {
        let mut lhs = self.duration_unary()?;
        while let Tok::Op(op @ (T_ADD | T_SUB | T_MUL | T_DIV | T_MOD | T_POW)) = *self.peek() {
            let prec = precedence(op);
            if prec < min_prec {
                break;
            }
            self.next();
            let next_min = if op == T_POW { prec } else { prec + 1 };
            let rhs = self.duration_expr(next_min)?;
            lhs = DurationExpr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn duration_unary(&mut self) -> Result<DurationExpr, ParseError> {
        if let Tok::Op(op @ (T_ADD | T_SUB)) = *self.peek() {
            self.next();
            let x = self.duration_expr(PREC_POW)?;
            return Ok(if op == T_SUB {
                DurationExpr::Unary(true, Box::new(x))
            } else {
                x
            });
        }
        self.duration_atom()
    }

    /// A literal, `step()`, `range()`, `min_of(…)`, `max_of(…)`, `(…)`.
    fn duration_atom(&mut self) -> Result<DurationExpr, ParseError> {
        match self.peek().clone() {
            Tok::Number(v) => {
                self.next();
                Ok(DurationExpr::Number(v, false))
            }
            Tok::Duration(v) => {
                self.next();
                Ok(DurationExpr::Number(v, true))
            }
            Tok::LParen => {
                self.next();
                let d = self.duration_expr(0)?;
                self.expect(Tok::RParen, "duration expression")?;
                Ok(DurationExpr::Paren(Box::new(d)))
            }
            Tok::Ident(w) if *self.peek_at(1) == Tok::LParen => {
                let lower = w.to_ascii_lowercase();
                match lower.as_str() {
                    "step" | "range" => {
                        self.next();
                        self.next();
                        self.expect(Tok::RParen, "duration expression")?;
                        Ok(if lower == "step" {
                            DurationExpr::Step
                        } else {
                            DurationExpr::Range
                        })
                    }
                    "min_of" | "max_of" => {
                        self.next();
                        self.next();
                        let a = self.duration_expr(0)?;
                        self.expect(Tok::Comma, "duration expression")?;
                        let b = self.duration_expr(0)?;
                        self.expect(Tok::RParen, "duration expression")?;
                        let (a, b) = (Box::new(a), Box::new(b));
                        Ok(if lower == "min_of" {
                            DurationExpr::MinOf(a, b)
                        } else {
                            DurationExpr::MaxOf(a, b)
                        })
                    }
                    _ => Err(self.unexpected(
                        "duration expression",
                        "number, duration, step(), or range()",
                    )),
                }
            }
            _ => Err(self.unexpected(
                "duration expression",
                "number, duration, step(), or range()",
            )),
        }
    }

    /// After `offset`: a signed literal, `step()`, `range()`,
    /// `min_of`/`max_of`, or a parenthesised duration expression, with an
    /// optional sign. Returns the literal's seconds or the expression.
    fn offset_duration(&mut self) -> Result<(f64, Option<DurationExpr>), ParseError> {
        let (start, _) = self.span();
        let neg = self.sign();
        let ok_start = matches!(self.peek(), Tok::Number(_) | Tok::Duration(_) | Tok::LParen)
            || matches!(self.peek(), Tok::Ident(w) if ["step", "range", "min_of", "max_of"].iter().any(|k| is_keyword(w, k)) && *self.peek_at(1) == Tok::LParen);
        if !ok_start {
            return Err(self.unexpected("offset", "number, duration, step(), or range()"));
        }
        let atom = self.duration_atom()?;
        let d = match neg {
            Some(true) => DurationExpr::Unary(true, Box::new(atom)),
            _ => atom,
        };
        let end = self.toks[self.at - 1].end;
        self.literal_or_expr(d, start, end, true)
    }

    /// After `@`: a signed number or duration, `start()` or `end()`.
    fn at_value(&mut self) -> Result<AtModifier, ParseError> {
        let (start, _) = self.span();
        if let Tok::Ident(w) = self.peek().clone() {
            if (is_keyword(&w, "start") || is_keyword(&w, "end")) && *self.peek_at(1) == Tok::LParen
            {
                self.next();
                self.next();
                self.expect(Tok::RParen, "@")?;
                return Ok(if is_keyword(&w, "start") {
                    AtModifier::Start
                } else {
                    AtModifier::End
                });
            }
        }
        let neg = self.sign() == Some(true);
        let v = match self.peek() {
            Tok::Number(v) | Tok::Duration(v) => *v,
            _ => return Err(self.unexpected("@", "timestamp")),
        };
        let end = self.next().end;
        let ts = if neg { -v } else { v };
        if !ts.is_finite() || ts * 1000.0 >= i64::MAX as f64 || ts * 1000.0 <= i64::MIN as f64 {
            return Err(self.error_at(
                start,
                end,
                format!("timestamp out of bounds for @ modifier: {ts:.6}"),
            ));
        }
        // Whole milliseconds, rounded as Prometheus rounds them.
        let ms = (ts * 1000.0).round() as i64;
        let t = if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        };
        Ok(AtModifier::At(t))
    }
}

/// A literal's seconds as Prometheus keeps them: rounded to nanoseconds,
/// then read in whole milliseconds (truncated).
fn secs(s: f64) -> Duration {
    let ns = (s * 1e9).round();
    let ms = (ns / 1e6).trunc();
    Duration::from_secs_f64((ms / 1000.0).clamp(0.0, MAX_DURATION_SECS))
}

fn check_zero_divisors(d: &DurationExpr) -> Result<(), String> {
    match d {
        DurationExpr::Binary(op, a, b) => {
            if let DurationExpr::Number(v, _) = b.as_ref() {
                if *v == 0.0 && *op == T_DIV {
                    return Err("division by zero".into());
                }
                if *v == 0.0 && *op == T_MOD {
                    return Err("modulo by zero".into());
                }
            }
            check_zero_divisors(a)?;
            check_zero_divisors(b)
        }
        DurationExpr::MinOf(a, b) | DurationExpr::MaxOf(a, b) => {
            check_zero_divisors(a)?;
            check_zero_divisors(b)
        }
        DurationExpr::Unary(_, x) | DurationExpr::Paren(x) => check_zero_divisors(x),
        _ => Ok(()),
    }
}

fn set_offset(e: &mut Expr, secs_value: f64, expr: Option<DurationExpr>) -> Result<(), String> {
    let (offset, offset_expr) = match e {
        Expr::VectorSelector(vs) => (&mut vs.offset, &mut vs.offset_expr),
        Expr::MatrixSelector(m) => (&mut m.vs.offset, &mut m.vs.offset_expr),
        Expr::Subquery(sq) => (&mut sq.offset, &mut sq.offset_expr),
        _ => {
            return Err(
                "offset modifier must be preceded by an instant vector selector or range vector selector or a subquery"
                    .into(),
            )
        }
    };
    if offset.is_some() || offset_expr.is_some() {
        return Err("offset may not be set multiple times".into());
    }
    match expr {
        Some(x) => *offset_expr = Some(x),
        None => *offset = Some(Offset::from_secs(secs_value)),
    }
    Ok(())
}

fn set_at(e: &mut Expr, at: AtModifier) -> Result<(), String> {
    let slot = match e {
        Expr::VectorSelector(vs) => &mut vs.at,
        Expr::MatrixSelector(m) => &mut m.vs.at,
        Expr::Subquery(sq) => &mut sq.at,
        _ => {
            return Err(
                "@ modifier must be preceded by an instant vector selector or range vector selector or a subquery"
                    .into(),
            )
        }
    };
    if slot.is_some() {
        return Err("@ <timestamp> may not be set multiple times".into());
    }
    *slot = Some(at);
    Ok(())
}
