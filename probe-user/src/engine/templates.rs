//! The HTTP request templates the kernel sends from (`PROBE_HTTP_REQS`): one per distinct
//! request, shared by every probe that sends it, held while any of them is in flight and
//! kept a while after, so a check probed every few seconds does not rewrite its template
//! each time. Pure bookkeeping: the engine writes and deletes the kernel's entries as told.
use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

/// How long an unused template stays in the kernel.
pub const IDLE_KEEP: Duration = Duration::from_secs(60);

struct Entry {
    bytes: Arc<[u8]>,
    /// Probes in flight that use it.
    users: u32,
    last_used: Instant,
}

/// Templates by request bytes, ids reused once freed.
pub struct Templates {
    by_bytes: HashMap<Arc<[u8]>, u32>,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    max: u32,
}

/// What `acquire` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Already in the kernel.
    Known(u32),
    /// New: the caller writes it to the kernel under this id before the probe goes out.
    New(u32),
    /// Every id is in use by probes in flight.
    Full,
}

impl Templates {
    pub fn new(max: u32) -> Self {
        Self {
            by_bytes: HashMap::new(),
            entries: Vec::new(),
            free: Vec::new(),
            max,
        }
    }

    /// A template for `bytes`, held for one probe until `release`.
    pub fn acquire(&mut self, bytes: &Arc<[u8]>, now: Instant) -> Acquired {
        if let Some(&id) = self.by_bytes.get(bytes) {
            let e = self.entries[id as usize].as_mut().expect("indexed entries exist");
            e.users += 1;
            e.last_used = now;
            return Acquired::Known(id);
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None if (self.entries.len() as u32) < self.max => {
                self.entries.push(None);
                self.entries.len() as u32 - 1
            }
            None => return Acquired::Full,
        };
        self.entries[id as usize] = Some(Entry {
            bytes: bytes.clone(),
            users: 1,
            last_used: now,
        });
        self.by_bytes.insert(bytes.clone(), id);
        Acquired::New(id)
    }

    /// One probe of template `id` is over.
    pub fn release(&mut self, id: u32, now: Instant) {
        if let Some(Some(e)) = self.entries.get_mut(id as usize) {
            e.users = e.users.saturating_sub(1);
            e.last_used = now;
        }
    }

    /// Frees the templates unused for IDLE_KEEP; returns their ids, for the caller to delete
    /// from the kernel.
    pub fn sweep(&mut self, now: Instant) -> Vec<u32> {
        let mut gone = Vec::new();
        for (id, slot) in self.entries.iter_mut().enumerate() {
            let idle = slot
                .as_ref()
                .is_some_and(|e| e.users == 0 && now.duration_since(e.last_used) >= IDLE_KEEP);
            if idle {
                let e = slot.take().expect("checked above");
                self.by_bytes.remove(&e.bytes);
                self.free.push(id as u32);
                gone.push(id as u32);
            }
        }
        gone
    }

    /// Templates held now.
    pub fn held(&self) -> usize {
        self.by_bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Arc<[u8]> {
        Arc::from(s.as_bytes())
    }

    #[test]
    fn one_template_per_distinct_request() {
        let now = Instant::now();
        let mut t = Templates::new(8);
        let (a, b) = (req("GET /a"), req("GET /b"));
        assert_eq!(t.acquire(&a, now), Acquired::New(0));
        assert_eq!(t.acquire(&a, now), Acquired::Known(0));
        assert_eq!(t.acquire(&b, now), Acquired::New(1));
        assert_eq!(t.held(), 2);
    }

    #[test]
    fn templates_in_use_or_recently_used_stay() {
        let now = Instant::now();
        let mut t = Templates::new(8);
        let (a, b) = (req("GET /a"), req("GET /b"));
        t.acquire(&a, now);
        t.acquire(&b, now);
        t.release(1, now);
        assert!(t.sweep(now + IDLE_KEEP / 2).is_empty(), "b was used a moment ago");
        assert_eq!(
            t.sweep(now + IDLE_KEEP),
            vec![1],
            "b idle for IDLE_KEEP, a still in flight"
        );
        assert_eq!(
            t.acquire(&req("GET /c"), now),
            Acquired::New(1),
            "the freed id is reused"
        );
        assert_eq!(t.acquire(&b, now), Acquired::New(2), "b comes back under a new id");
    }

    #[test]
    fn full_when_every_id_is_in_flight() {
        let now = Instant::now();
        let mut t = Templates::new(2);
        t.acquire(&req("1"), now);
        t.acquire(&req("2"), now);
        assert_eq!(t.acquire(&req("3"), now), Acquired::Full);
        t.release(0, now);
        assert_eq!(t.sweep(now + IDLE_KEEP), vec![0]);
        assert_eq!(t.acquire(&req("3"), now), Acquired::New(0));
    }
}
