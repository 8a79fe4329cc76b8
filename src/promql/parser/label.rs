//! Label matchers as written in a selector.

/// A matcher's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// The operator.
    pub op: MatchOp,
    /// The label name.
    pub name: String,
    /// The value or pattern.
    pub value: String,
}

/// The matchers inside a selector's braces.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matchers {
    /// In the order written.
    pub matchers: Vec<Matcher>,
}
