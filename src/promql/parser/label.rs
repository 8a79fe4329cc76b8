//! Label matchers as written in a selector.

/// A matcher's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchOp {
    /// `=`
    Equal,
    /// `!=`
    NotEqual,
    /// `=~`
    Re,
    /// `!~`
    NotRe,
}

impl MatchOp {
    /// How it is written.
    pub fn text(&self) -> &'static str {
        match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::Re => "=~",
            MatchOp::NotRe => "!~",
        }
    }
}

/// `name op "value"`.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// The operator.
    pub op: MatchOp,
    /// The label name.
    pub name: String,
    /// The value or pattern.
    pub value: String,
    /// The matcher as storage runs it, its regex compiled once, when the
    /// query is parsed.
    pub compiled: crate::storage::index::Matcher,
}

impl Matcher {
    /// A matcher; an error for a pattern that is not a regular expression.
    pub fn new(op: MatchOp, name: String, value: String) -> Result<Self, String> {
        use crate::storage::index::MatchOp as S;
        let sop = match op {
            MatchOp::Equal => S::Equal,
            MatchOp::NotEqual => S::NotEqual,
            MatchOp::Re => S::Regex,
            MatchOp::NotRe => S::NotRegex,
        };
        let compiled =
            crate::storage::index::Matcher::new(sop, &name, &value).map_err(|e| e.to_string())?;
        Ok(Self {
            op,
            name,
            value,
            compiled,
        })
    }
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op && self.name == other.name && self.value == other.value
    }
}

impl Eq for Matcher {}

/// The matchers inside a selector's braces.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matchers {
    /// In the order written.
    pub matchers: Vec<Matcher>,
}
