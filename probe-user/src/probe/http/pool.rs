//! The keep-alive path's idle connections: a few per target, for targets up to a bound set by
//! the open-file limit, since every idle connection is a descriptor held open.
use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Mutex, PoisonError},
};

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1::SendRequest;

use super::Scheme;

/// Idle connections kept per target; probes to one target are sequential, so more than two
/// would only hold sockets open on the backend.
const IDLE_PER_TARGET: usize = 2;
/// Targets with idle connections at most, whatever the open-file limit.
const MAX_IDLE_TARGETS: usize = 65_536;

/// The bound on targets with idle connections under an open-file limit of `nofile`: half of it
/// (the rest is for connections in flight, the API, DNS and the daemon's own files; a check
/// that finds no descriptor ends as a local error, never a verdict).
fn idle_targets_for(nofile: Option<u64>) -> usize {
    nofile.map_or(MAX_IDLE_TARGETS, |n| {
        usize::try_from(n / 2).unwrap_or(usize::MAX).min(MAX_IDLE_TARGETS)
    })
}

type Sender = SendRequest<Empty<Bytes>>;

/// Connections are reusable only for the same target, scheme, TLS name and TLS policy.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct PoolKey {
    pub target: SocketAddr,
    pub scheme: Scheme,
    pub server_name: String,
    /// The TLS client (`TlsVerify::client_id`): a connection is reused only under its own.
    pub client: u64,
}

/// Idle connections by target; only targets that have some are in the map, so its size is
/// what `targets` bounds.
pub(super) struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<Sender>>>,
    targets: usize,
}

impl Pool {
    pub fn new() -> Self {
        Self::bounded(idle_targets_for(crate::kernel::process::open_files_limit()))
    }

    fn bounded(targets: usize) -> Self {
        Self {
            idle: Mutex::new(HashMap::new()),
            targets,
        }
    }

    /// An idle connection to `key` that is still open and ready for a request.
    pub fn checkout(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.get_mut(key)?;
        let mut found = None;
        while let Some(s) = list.pop() {
            if !s.is_closed() && s.is_ready() {
                found = Some(s);
                break;
            }
        }
        if list.is_empty() {
            idle.remove(key);
        }
        found
    }

    /// Keeps `sender` for the next probe of `key`, unless the target has enough idle ones or
    /// the bound on targets is reached; a sender not kept is dropped, which ends its
    /// connection.
    pub fn checkin(&self, key: PoolKey, sender: Sender) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if !idle.contains_key(&key) && idle.len() >= self.targets {
            return;
        }
        let list = idle.entry(key).or_default();
        list.retain(|s| !s.is_closed());
        if list.len() < IDLE_PER_TARGET {
            list.push(sender);
        }
    }

    #[cfg(test)]
    fn targets_held(&self) -> usize {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_of_the_open_file_limit_at_most() {
        assert_eq!(idle_targets_for(Some(20_000)), 10_000);
        assert_eq!(idle_targets_for(Some(65_536)), 32_768);
        assert_eq!(idle_targets_for(Some(1_048_576)), MAX_IDLE_TARGETS);
        assert_eq!(idle_targets_for(None), MAX_IDLE_TARGETS);
        assert_eq!(idle_targets_for(Some(1)), 0);
    }

    /// A real HTTP/1.1 connection's sender, to a server that answers nothing; the server's end
    /// is kept open in `held`.
    async fn sender(listener: &tokio::net::TcpListener, held: &mut Vec<tokio::net::TcpStream>) -> Sender {
        let addr = listener.local_addr().unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        held.push(listener.accept().await.unwrap().0);
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut sender = sender;
        sender.ready().await.unwrap();
        sender
    }

    fn key(port: u16) -> PoolKey {
        PoolKey {
            target: SocketAddr::from(([127, 0, 0, 1], port)),
            scheme: Scheme::Http,
            server_name: String::new(),
            client: 0,
        }
    }

    #[tokio::test]
    async fn past_the_bound_a_new_target_keeps_nothing_and_a_taken_target_leaves_the_map() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = Pool::bounded(2);
        let mut held = Vec::new();
        pool.checkin(key(1), sender(&listener, &mut held).await);
        pool.checkin(key(2), sender(&listener, &mut held).await);
        pool.checkin(key(3), sender(&listener, &mut held).await);
        assert_eq!(pool.targets_held(), 2);
        assert!(pool.checkout(&key(3)).is_none(), "the third target was over the bound");
        // A known target may still return its connection, and one taken leaves the map.
        pool.checkin(key(1), sender(&listener, &mut held).await);
        assert!(pool.checkout(&key(2)).is_some());
        assert_eq!(pool.targets_held(), 1);
        pool.checkin(key(3), sender(&listener, &mut held).await);
        assert!(pool.checkout(&key(3)).is_some(), "room again once target 2 left");
    }
}
