//! The rules every health check follows, kept once for the config reader and the probers:
//! the dialects with their defaults and thresholds, and the HTTP limits and value checks.
//!
//! Nothing here imports the rest of the crate, so `config`, `health` and `probe` can all
//! depend on it without a cycle. Within it the files form a chain: limits, error, http,
//! dialect, thresholds.
mod dialect;
mod error;
mod http;
mod kinds;
pub mod limits;
mod thresholds;

pub use dialect::{Dialect, Protocol};
pub use error::{Rule, RuleError};
pub use http::{check_header_level, is_dns_name, Header, HostName, HttpPath, Method, StatusRange};
pub use kinds::SinkType;
pub use thresholds::{ThresholdError, ThresholdKey, Thresholds};
