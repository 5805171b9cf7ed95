//! Sinks: what the node's data path is told about health. Each sink follows the daemon's
//! change stream for one profile and keeps a forwarding structure in step with the profile's
//! eligible set.
pub mod model;
pub mod slots;
