//! The HTTP(S) and gRPC check's settings, in the kind's own folder: the settings (`model`),
//! their keys in the reference (`keys`), and how the file is read into them (`read`).
mod keys;
mod model;
mod read;

pub use keys::{ENDPOINT_KEYS, HEALTH_KEYS};
pub use model::*;
pub(crate) use read::{check_override, headers, metadata, read, TLS_KEYS};
