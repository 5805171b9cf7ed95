//! Endpoints from DNS (`endpoints_from = "dns"`, `[profile.discovery]`): for each such profile
//! a task asks its resolvers for the name's records (`resolve`), makes the endpoints they
//! describe and the fleet batches that take the profile to them (`diff`), and hands those to
//! the daemon as the fleet API's batches are handed: checked by the profile's rules, applied
//! whole, kept in the fleet journal, followed by the DNS zone. An endpoint whose records stay
//! keeps its health; a resolver that fails changes nothing (the last good set stays across
//! restarts too: it is in the journal), and the name is asked again sooner, then less often.
//! The tasks run on a thread of their own, started with the first such profile, and follow
//! each reload: a profile whose discovery changed starts over, one that went stops.
mod answer;
mod diff;
mod resolve;

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::sync::watch;

use serde::{Deserialize, Serialize};

use crate::{
    config::{Config, Discovery},
    fleet::{Applied, Batch, FleetView},
};

/// What the discoveries drive: a profile's endpoints as the fleet holds them, and batches
/// applied to them by the fleet API's rules. The daemon's `Control` is it; the discoveries
/// know nothing else of the daemon.
pub(crate) trait Fleet: Clone + Send + Sync + 'static {
    type Error: std::fmt::Display + Send;
    /// Every endpoint of `profile`, with its generation.
    fn endpoints(&self, profile: &str) -> impl Future<Output = Result<FleetView, Self::Error>> + Send;
    /// Applies `batch` to `profile` (one whose endpoints come from DNS), whole or not at all.
    fn apply(&self, profile: &str, batch: Batch) -> impl Future<Output = Result<Applied, Self::Error>> + Send;
}

/// A profile's discovery (`[profile.discovery]`) as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveryView {
    /// The name asked and its records' type.
    pub name: String,
    #[serde(rename = "type")]
    pub records: String,
    /// When the last answer came (Unix ms), and how many endpoints it gave.
    pub answered_unix_ms: Option<u64>,
    pub endpoints: usize,
    /// Why the lookups fail, since when (Unix ms): the endpoints are the last good set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since_unix_ms: Option<u64>,
}

/// The discoveries a configuration asks for: profile name and settings.
type Asked = Vec<(String, Discovery)>;

/// The discovery thread: its tasks follow what `tx` says, and say how they go in `views`.
pub(crate) struct Discoveries {
    tx: watch::Sender<Asked>,
    thread: Option<std::thread::JoinHandle<()>>,
    views: Views,
}

/// Each running discovery's view, by profile.
type Views = Arc<Mutex<HashMap<String, DiscoveryView>>>;

/// The discoveries `config` asks for.
pub(crate) fn asked(config: &Config) -> Asked {
    config
        .profiles
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.discovery.clone()?)))
        .collect()
}

impl Discoveries {
    /// Starts the thread, its tasks applying batches to `fleet`.
    pub(crate) fn start(fleet: impl Fleet, asked: Asked) -> std::io::Result<Discoveries> {
        let (tx, rx) = watch::channel(asked);
        let views = Views::default();
        let shown = views.clone();
        let thread = std::thread::Builder::new()
            .name("probed-discovery".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        log::error!("discovery: cannot start its runtime: {e}; no profile's endpoints come from DNS");
                        return;
                    }
                };
                rt.block_on(follow(fleet, rx, shown));
            })?;
        Ok(Discoveries {
            tx,
            thread: Some(thread),
            views,
        })
    }

    /// How profile `profile`'s discovery goes, if it has one.
    pub(crate) fn view(&self, profile: &str) -> Option<DiscoveryView> {
        self.views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(profile)
            .cloned()
    }

    /// The discoveries of a reloaded configuration.
    pub(crate) fn follow(&self, asked: Asked) {
        self.tx.send_replace(asked);
    }

    /// Ends every task and the thread (a lookup or a batch in progress is dropped: the next
    /// start asks again).
    pub(crate) fn stop(mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        drop(self);
        let _ = thread.join();
    }
}

impl Drop for Discoveries {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop; `stop` joins it.
        let (tx, _) = watch::channel(Vec::new());
        drop(std::mem::replace(&mut self.tx, tx));
    }
}

/// Keeps one task per asked discovery until the channel closes.
async fn follow(fleet: impl Fleet, mut rx: watch::Receiver<Asked>, views: Views) {
    let mut running: HashMap<String, (Discovery, tokio::task::JoinHandle<()>)> = HashMap::new();
    loop {
        let asked: HashMap<String, Discovery> = rx.borrow_and_update().iter().cloned().collect();
        running.retain(|name, (d, task)| {
            let keep = asked.get(name) == Some(d);
            if !keep {
                task.abort();
                views.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
            }
            keep
        });
        for (name, d) in asked {
            if let std::collections::hash_map::Entry::Vacant(place) = running.entry(name) {
                let shown = Shown::new(views.clone(), place.key().clone(), &d);
                let task = tokio::spawn(discover(fleet.clone(), place.key().clone(), d.clone(), shown));
                place.insert((d, task));
            }
        }
        if rx.changed().await.is_err() {
            break;
        }
    }
    for (_, (_, task)) in running {
        task.abort();
    }
}

/// One discovery's place in the views.
struct Shown {
    views: Views,
    profile: String,
}

impl Shown {
    /// `profile`'s place, showing discovery `d` before its first lookup.
    fn new(views: Views, profile: String, d: &Discovery) -> Shown {
        views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(profile.clone(), blank_view(d));
        Shown { views, profile }
    }

    /// Changes the view (gone once the discovery was stopped: then nothing).
    fn set(&self, f: impl FnOnce(&mut DiscoveryView)) {
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = views.get_mut(&self.profile) {
            f(v);
        }
    }

    /// The lookup or its batches failed: why, since the first failure.
    fn failing(&self, why: &str) {
        self.set(|v| {
            v.failing_since_unix_ms.get_or_insert_with(unix_ms);
            v.failing = Some(why.to_string());
        });
    }
}

/// A discovery's view before its first lookup.
fn blank_view(d: &Discovery) -> DiscoveryView {
    DiscoveryView {
        name: d.name.clone(),
        records: d.records.name().into(),
        answered_unix_ms: None,
        endpoints: 0,
        failing: None,
        failing_since_unix_ms: None,
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One profile's discovery, until aborted.
async fn discover(fleet: impl Fleet, profile: String, d: Discovery, shown: Shown) {
    let mut failing: Option<String> = None;
    let mut retry = d.min_ttl;
    loop {
        let wait = match resolve::lookup(&d).await {
            Ok(found) => {
                if let Some(why) = failing.take() {
                    log::info!("discovery {profile}: {} answers again (it failed: {why})", d.name);
                }
                retry = d.min_ttl;
                match apply(&fleet, &profile, &found.wanted).await {
                    Ok(()) => shown.set(|v| {
                        (v.answered_unix_ms, v.endpoints) = (Some(unix_ms()), found.wanted.len());
                        (v.failing, v.failing_since_unix_ms) = (None, None);
                    }),
                    Err(e) => {
                        let why = format!("the endpoints of {} could not be applied: {e}", d.name);
                        log::warn!("discovery {profile}: {why}");
                        shown.failing(&why);
                    }
                }
                next_lookup(found.ttl, &d)
            }
            Err(why) => {
                if failing.as_deref() != Some(why.as_str()) {
                    log::warn!(
                        "discovery {profile}: {} could not be resolved, its last good endpoints stay: {why}",
                        d.name
                    );
                }
                shown.failing(&why);
                failing = Some(why);
                let wait = retry;
                retry = (retry * 2).min(d.max_ttl);
                wait
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// When to ask again after an answer: at its TTL, within the discovery's bounds; at the upper
/// bound when it gave none.
fn next_lookup(ttl: Option<u32>, d: &Discovery) -> Duration {
    ttl.map_or(d.max_ttl, |t| {
        Duration::from_secs(u64::from(t)).clamp(d.min_ttl, d.max_ttl)
    })
}

/// Takes profile `profile` to `wanted`, in batches.
async fn apply<F: Fleet>(fleet: &F, profile: &str, wanted: &[diff::Wanted]) -> Result<(), F::Error> {
    let now = fleet.endpoints(profile).await?;
    for batch in diff::batches(&now.endpoints, wanted, crate::fleet::MAX_ITEMS) {
        let applied = fleet.apply(profile, batch).await?;
        log::info!(
            "discovery {profile}: {} added, {} changed, {} removed",
            applied.added,
            applied.changed,
            applied.removed
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DiscoveryRecords;

    #[test]
    fn the_next_lookup_is_at_the_ttl_within_bounds() {
        let d = Discovery {
            name: "web.example.".into(),
            records: DiscoveryRecords::A,
            port: Some(80),
            resolvers: vec!["192.0.2.53:53".parse().unwrap()],
            min_ttl: Duration::from_secs(2),
            max_ttl: Duration::from_secs(30),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(next_lookup(Some(10), &d), Duration::from_secs(10));
        assert_eq!(next_lookup(Some(0), &d), Duration::from_secs(2));
        assert_eq!(next_lookup(Some(86_400), &d), Duration::from_secs(30));
        assert_eq!(next_lookup(None, &d), Duration::from_secs(30));
    }
}
