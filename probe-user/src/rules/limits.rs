//! Limits shared by the config reader and the probers. SPEC section 2 unless a comment says
//! the bound is ours.

/// Custom headers per level (profile or endpoint); tm allows 8 `header:value` pairs.
pub const MAX_HEADERS: usize = 8;
/// Healthy status ranges; tm allows 8 (an lb class counts as one range).
pub const MAX_STATUS_RANGES: usize = 8;
/// ga: a path is 1 to 80 characters.
pub const MAX_PATH_LEN: usize = 80;
/// ga: the punctuation a path may hold besides ASCII letters and digits.
pub const PATH_CHARS: &str = "-/.%?#&_;~!()*[]@$^:',+";
/// A DNS name as sent in a Host header (RFC 1035), and one label of it.
pub const MAX_HOST_LEN: usize = 253;
pub const MAX_LABEL_LEN: usize = 63;
/// The status codes a healthy set may name.
pub const STATUS_CODES: (u16, u16) = (100, 599);
/// RFC 9110 token characters besides ASCII letters and digits: what a header name is made of.
pub const TOKEN_PUNCTUATION: &str = "!#$%&'*+-.^_`|~";
/// Headers the prober sets itself: a custom value would break framing or its close policy.
pub const RESERVED_HEADERS: [&str; 5] = ["content-length", "transfer-encoding", "connection", "upgrade", "te"];
/// The largest threshold any dialect accepts.
pub const THRESHOLD_MAX: u32 = 10;
/// Ours: the probe timeout range, in milliseconds, that the widest dialect (lb) allows;
/// `probed check --timeout` takes the same.
pub const TIMEOUT_MS: (u64, u64) = (100, 60_000);
/// Ours: the longest pause a config names (pacing intervals, jitter), in milliseconds;
/// `probed check --interval` takes the same.
pub const MAX_PACING_MS: u64 = 300_000;
/// Ours: a UDP request or expected reply, in bytes (`health.request`/`response`, `--send`,
/// `--expect`).
pub const MAX_UDP_PAYLOAD: usize = 500;
/// Ours: the most slots a slot table may have (`[[sink]] slots`); the config refuses more.
pub const MAX_SLOTS: u32 = 65_536;
/// Ours: the slots of a slot table whose sink does not say.
pub const DEFAULT_SLOTS: u32 = 64;
/// Ours: a probe that starts later than this after its due time no longer keeps its windows
/// (SPEC 3) to the precision the seeds' figures need; its endpoint counts as behind.
pub const BEHIND_NS: u64 = 50_000_000;
