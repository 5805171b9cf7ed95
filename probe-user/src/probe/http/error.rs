//! Why an HTTP(S) check cannot be built. It lives apart from request.rs so that request, status
//! and tls can all return it without importing one another.
use crate::rules::RuleError;

/// A setting that is not allowed: each variant names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpCheckError {
    /// A value against the rules the config reader applies too (path, host, headers, status).
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// A setting only the prober has: body limit, expected body, timeout.
    #[error("{field} {value:?} is not allowed: {allowed}")]
    Invalid {
        field: &'static str,
        value: String,
        allowed: String,
    },
    /// The roots for strict TLS could not be loaded.
    #[error("{field} {path:?}: {reason}")]
    Roots {
        field: &'static str,
        path: String,
        reason: String,
    },
}

impl HttpCheckError {
    pub(crate) fn invalid(field: &'static str, value: impl Into<String>, allowed: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            value: value.into(),
            allowed: allowed.into(),
        }
    }
}
