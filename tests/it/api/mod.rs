//! The API and the CLI that reads it: who may change state, what floods of clients cannot do,
//! the status in pages and streams, `probed events` and `probed status --watch`.
mod auth;
mod events_follow;
mod limits;
mod status_pages;
mod status_watch;
mod tcp_peers;
