//! Operator and aggregation identities, and how they are written.

use std::fmt;

/// Which operator or aggregation.
pub type TokenId = u8;

macro_rules! tokens {
    ($($name:ident = $id:expr, $text:expr;)*) => {
        $(
            #[doc = concat!("`", $text, "`")]
            pub const $name: TokenId = $id;
        )*
        /// How `id` is written.
        pub fn text(id: TokenId) -> &'static str {
            match id {
                $($id => $text,)*
                _ => "<unknown>",
            }
        }
    };
}

tokens! {
    T_ADD = 1, "+";
    T_SUB = 2, "-";
    T_MUL = 3, "*";
    T_DIV = 4, "/";
    T_MOD = 5, "%";
    T_POW = 6, "^";
    T_ATAN2 = 7, "atan2";
    T_EQLC = 8, "==";
    T_NEQ = 9, "!=";
    T_GTR = 10, ">";
    T_LSS = 11, "<";
    T_GTE = 12, ">=";
    T_LTE = 13, "<=";
    T_LAND = 14, "and";
    T_LOR = 15, "or";
    T_LUNLESS = 16, "unless";
    T_TRIM_UPPER = 17, "</";
    T_TRIM_LOWER = 18, ">/";
    T_SUM = 30, "sum";
    T_AVG = 31, "avg";
    T_COUNT = 32, "count";
    T_MIN = 33, "min";
    T_MAX = 34, "max";
    T_GROUP = 35, "group";
    T_STDDEV = 36, "stddev";
    T_STDVAR = 37, "stdvar";
    T_TOPK = 38, "topk";
    T_BOTTOMK = 39, "bottomk";
    T_COUNT_VALUES = 40, "count_values";
    T_QUANTILE = 41, "quantile";
    T_LIMITK = 42, "limitk";
    T_LIMIT_RATIO = 43, "limit_ratio";
}

/// The aggregation named `name` (case-insensitive).
pub fn aggregation(name: &str) -> Option<TokenId> {
    (T_SUM..=T_LIMIT_RATIO).find(|&id| text(id).eq_ignore_ascii_case(name))
}

/// Whether `id` is a comparison (`== != > < >= <=`).
pub fn is_comparison(id: TokenId) -> bool {
    (T_EQLC..=T_LTE).contains(&id)
}

/// Whether `id` is `and`, `or` or `unless`.
pub fn is_set_operator(id: TokenId) -> bool {
    (T_LAND..=T_LUNLESS).contains(&id)
}

/// An operator or aggregation, as the tree holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenType(TokenId);

impl TokenType {
    /// The token `id`.
    pub fn new(id: TokenId) -> Self {
        Self(id)
    }

    /// Which token.
    pub fn id(&self) -> TokenId {
        self.0
    }
}

impl fmt::Display for TokenType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(text(self.0))
    }
}
