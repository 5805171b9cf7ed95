//! What bounds the API's use of descriptors, memory and time: connection cap with eviction of
//! idle connections, header/idle timeouts, request size caps, and accept-error backoff.
use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::Notify,
    time::Instant,
};

/// Connections served at once. A few operators, scrapers and load balancers poll the API; 256 is
/// far above that, and keeps the daemon's descriptors (probes need them too) well under the
/// unit's `LimitNOFILE`. At the cap, the oldest connection with no request in flight is closed
/// to make room, so a flood of idle connections cannot lock operators out.
pub(super) const MAX_CONNECTIONS: usize = 256;
/// How long a client may take to send a request head, counted from the connection (or the end
/// of the previous response): this also bounds idle keep-alive connections.
pub(super) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight and no byte read or written for this long is closed
/// (a slow body, a client that does not read its answer).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// hyper's read buffer, which caps a request head: the API's heads are a path and a few
/// headers. 8 KiB is the least hyper accepts.
pub(super) const MAX_BUF_SIZE: usize = 16 * 1024;
/// Header lines per request (hyper's default is 100).
pub(super) const MAX_HEADERS: usize = 64;
/// The largest request body accepted: no route takes a body (POSTs are empty).
pub(super) const MAX_BODY_BYTES: u64 = 1024;
/// The time limits of one connection; production uses `Timeouts::API`, unit tests shorter ones.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub(super) header_read: Duration,
    pub(super) idle: Duration,
}

impl Timeouts {
    pub(super) const API: Timeouts = Timeouts {
        header_read: HEADER_READ_TIMEOUT,
        idle: IDLE_TIMEOUT,
    };
}

/// How long a new connection waits at the cap for an evicted one to go.
pub(super) const ADMIT_WAIT: Duration = Duration::from_millis(100);
/// Accept errors are retried with `crate::accept::Backoff`.
pub(super) use crate::accept::Backoff as AcceptBackoff;

/// One served connection as the table sees it.
pub(super) struct Slot {
    id: u64,
    /// Requests whose response has not been handed to hyper in full.
    in_flight: AtomicUsize,
    /// Milliseconds from `born` to the last byte read or written.
    last_io_ms: AtomicU64,
    born: Instant,
    /// Wakes the connection's task when it is chosen for eviction.
    pub(super) evict: Notify,
}

impl Slot {
    pub(super) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_io_ms.store(ms, Ordering::Relaxed);
    }

    /// When the connection becomes idle-expired if nothing happens until then.
    pub(super) fn idle_deadline(&self, idle: Duration) -> Instant {
        self.born + Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed)) + idle
    }

    /// Counts a request until the guard (held by the response body) is dropped.
    pub(super) fn request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        RequestGuard(self.clone())
    }
}

pub(super) struct RequestGuard(Arc<Slot>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections being served, oldest first.
#[derive(Default)]
pub(super) struct Table {
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next_id: u64,
    slots: VecDeque<Arc<Slot>>,
}

impl Table {
    /// Registers a connection; it leaves the table when the returned entry is dropped.
    pub(super) fn register(self: &Arc<Self>) -> Entry {
        let mut t = self.inner.lock().expect("the table lock is never poisoned");
        t.next_id += 1;
        let slot = Arc::new(Slot {
            id: t.next_id,
            in_flight: AtomicUsize::new(0),
            last_io_ms: AtomicU64::new(0),
            born: Instant::now(),
            evict: Notify::new(),
        });
        t.slots.push_back(slot.clone());
        Entry {
            table: self.clone(),
            slot,
        }
    }

    /// Asks the oldest connection with no request in flight to close; false if all are busy.
    pub(super) fn evict_oldest_idle(&self) -> bool {
        let t = self.inner.lock().expect("the table lock is never poisoned");
        match t.slots.iter().find(|s| !s.busy()) {
            Some(s) => {
                // notify_one keeps a permit if the task is not waiting yet.
                s.evict.notify_one();
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().expect("the table lock is never poisoned").slots.len()
    }
}

pub(super) struct Entry {
    table: Arc<Table>,
    pub(super) slot: Arc<Slot>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut t = self.table.inner.lock().expect("the table lock is never poisoned");
        let id = self.slot.id;
        t.slots.retain(|s| s.id != id);
    }
}

/// A stream that records the time of its last read or write in its slot.
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) slot: Arc<Slot>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.slot.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.slot.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eviction_picks_the_oldest_idle_connection() {
        let table = Arc::new(Table::default());
        let a = table.register();
        let b = table.register();
        let c = table.register();
        let busy = a.slot.request();
        assert!(table.evict_oldest_idle());
        // a is busy, so b is asked to go; a's permit is not touched.
        tokio::time::timeout(Duration::from_millis(100), b.slot.evict.notified())
            .await
            .expect("the oldest idle connection is told to close");
        drop(busy);
        drop(b);
        assert_eq!(table.len(), 2);
        let x = table.register();
        let _g = x.slot.request();
        let _ga = a.slot.request();
        let _gc = c.slot.request();
        assert!(!table.evict_oldest_idle(), "busy connections are never evicted");
    }
}
