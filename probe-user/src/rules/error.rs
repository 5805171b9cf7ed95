//! How a broken rule is reported: `RuleError` names the field and the value, `Rule` says what is
//! allowed. The config reader puts only the `Rule` in its message, since its own error already
//! names the field (with its place in the file) and the value.
use super::limits::{
    MAX_HEADERS, MAX_PATH_LEN, MAX_STATUS_RANGES, PATH_CHARS, RESERVED_HEADERS, STATUS_CODES, TOKEN_PUNCTUATION,
};

/// A value that breaks a shared rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} is not allowed: {rule}")]
pub struct RuleError {
    /// The setting, as the caller calls it (a config key or a command-line flag).
    pub field: &'static str,
    /// The offending value as written.
    pub value: String,
    pub rule: Rule,
}

impl RuleError {
    pub fn new(field: &'static str, value: impl Into<String>, rule: Rule) -> Self {
        Self {
            field,
            value: value.into(),
            rule,
        }
    }

    /// The same error under the caller's name for the setting, e.g. `endpoint_headers`.
    #[must_use]
    pub fn in_field(self, field: &'static str) -> Self {
        Self { field, ..self }
    }
}

/// What is allowed instead; the text reads after "field = value: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rule {
    /// A dialect's interval or timeout range, e.g. "tm allows 10s or 30s".
    #[error("{0}")]
    Timing(String),
    #[error("lb, tm or ga")]
    Dialect,
    #[error("HEAD or GET")]
    Method,
    #[error("expected 1 to {MAX_PATH_LEN} characters starting with '/'")]
    PathShape,
    #[error("{0:?} is not allowed; use letters, digits and {chars}", chars = spaced(PATH_CHARS))]
    PathChar(char),
    #[error("'*' is not allowed in a Host")]
    HostWildcard,
    #[error("expected a domain name like \"www.example.com\" or an IP address, optionally with \":port\"")]
    HostName,
    #[error("expected \"name:value\"")]
    HeaderPair,
    #[error("the header name must be an HTTP token: letters, digits and {TOKEN_PUNCTUATION}")]
    HeaderName,
    #[error("the prober sets {name} itself; any header but {all} is allowed", all = RESERVED_HEADERS.join(", "))]
    HeaderReserved { name: String },
    #[error("the header value must be non-empty visible ASCII characters and spaces")]
    HeaderValue,
    #[error("'*' is not allowed in a Host header")]
    HostHeaderWildcard,
    #[error("at most {MAX_HEADERS} headers")]
    TooManyHeaders,
    #[error("{name} is set twice; each header name once per level")]
    HeaderTwice { name: String },
    #[error("expected a code or a range like \"200-299\" within {}-{}", STATUS_CODES.0, STATUS_CODES.1)]
    StatusRange,
    #[error("expected a class 1xx to 5xx")]
    StatusClass,
    #[error("at most {MAX_STATUS_RANGES} ranges")]
    TooManyRanges,
    #[error("at least one status code or range")]
    NoStatus,
    /// The command line's syntax, where classes, codes and ranges mix in one string.
    #[error(
        "a comma-separated list of at most {MAX_STATUS_RANGES} items, each a class 1xx-5xx, a code {lo}-{hi} \
         or a range A-B with {lo} <= A <= B <= {hi}",
        lo = STATUS_CODES.0,
        hi = STATUS_CODES.1
    )]
    StatusList,
}

/// `"-/."` as `"- / ."`, easier to read in a message.
fn spaced(chars: &str) -> String {
    chars.chars().map(String::from).collect::<Vec<_>>().join(" ")
}
