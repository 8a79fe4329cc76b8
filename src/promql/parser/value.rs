//! The types an expression evaluates to.

use std::fmt;

/// What an expression evaluates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// An instant vector.
    Vector,
    /// A scalar.
    Scalar,
    /// A range vector.
    Matrix,
    /// A string.
    String,
}

impl ValueType {
    /// The name Prometheus' messages use.
    pub fn documented(&self) -> &'static str {
        match self {
            ValueType::Vector => "instant vector",
            ValueType::Scalar => "scalar",
            ValueType::Matrix => "range vector",
            ValueType::String => "string",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueType::Vector => "vector",
            ValueType::Scalar => "scalar",
            ValueType::Matrix => "matrix",
            ValueType::String => "string",
        })
    }
}
