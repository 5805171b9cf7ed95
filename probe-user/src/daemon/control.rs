//! The one way into the daemon: `Control` sends the runner a `Command` and awaits its reply,
//! and holds the change stream's consumers (`consumers/`), which it starts, re-follows on a
//! reload and stops beside the runner. The API, the signal handlers and the tests depend on
//! this file, never on the runner.
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};

use super::{
    consumers::Consumers,
    protocol::{Command, FleetRequest, Reply, RequestError, SelectQuery},
    views::{EndpointView, ProfileView, ReloadReport, SelectView},
};
use crate::{
    changes::{Follower, Join, Snapshot, Subscription},
    config::Config,
    status::AdminState,
};

/// What a reload carries of the API's profiles: their generations, and those it takes from
/// the API.
struct CarriedFleet {
    generations: Vec<(String, u64)>,
    forgotten: Vec<String>,
}

/// A cheap, cloneable handle to the running daemon.
#[derive(Clone)]
pub struct Control {
    pub(crate) tx: mpsc::Sender<Command>,
    /// The file a reload without a config re-reads (`Options::config_path`).
    pub(crate) config_path: Option<Arc<std::path::Path>>,
    /// The events file, the sinks and the DNS server. Held across a reload (which so runs
    /// one at a time); the other requests take it for a moment, after the runner's reply.
    pub(crate) consumers: Arc<Mutex<Consumers>>,
    /// The fleet journal (`crate::fleet::journal`), appended after each batch the runner
    /// applied, on a blocking thread.
    pub(crate) journal: Option<Arc<std::sync::Mutex<crate::fleet::journal::Journal>>>,
    /// The profiles whose endpoints come from DNS (`crate::discovery`): started with the
    /// first, following each reload, stopped before the runner.
    pub(crate) discovery: Arc<std::sync::Mutex<Option<crate::discovery::Discoveries>>>,
}

impl Control {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, RequestError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)?
    }

    /// A status from the runner, with the sinks that follow each profile.
    async fn profiles(
        &self,
        profile: Option<&str>,
        page: Option<(usize, usize)>,
    ) -> Result<Vec<ProfileView>, RequestError> {
        let mut views = self
            .ask(|r| Command::Status(profile.map(str::to_string), page, r))
            .await?;
        self.consumers.lock().await.fill_sinks(&mut views);
        self.fill_discovery(&mut views);
        Ok(views)
    }

    /// Every profile.
    pub async fn status(&self) -> Result<Vec<ProfileView>, RequestError> {
        self.profiles(None, None).await
    }

    /// One profile.
    pub async fn profile(&self, profile: &str) -> Result<ProfileView, RequestError> {
        let mut views = self.profiles(Some(profile), None).await?;
        views.pop().ok_or_else(|| RequestError::NoProfile(profile.into()))
    }

    /// Every profile (all, or the one named) with `limit` of its endpoints from `offset`.
    pub async fn status_page(
        &self,
        profile: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ProfileView>, RequestError> {
        self.profiles(profile, Some((offset, limit))).await
    }

    /// One endpoint: the GetHealthStatus of SPEC section 5.
    pub async fn endpoint(&self, profile: &str, endpoint: &str) -> Result<EndpointView, RequestError> {
        self.ask(|r| Command::Endpoint(profile.into(), endpoint.into(), r))
            .await
    }

    /// Which endpoints would answer `query` now: what the DNS server answers the same source.
    pub async fn select(&self, profile: &str, query: SelectQuery) -> Result<SelectView, RequestError> {
        let regions = self.consumers.lock().await.regions();
        self.ask(|r| Command::Select(profile.into(), query, regions, r)).await
    }

    /// Enables, disables, drains or sets an endpoint to always-serve at runtime.
    pub async fn set_admin(
        &self,
        profile: &str,
        endpoint: &str,
        state: AdminState,
    ) -> Result<EndpointView, RequestError> {
        self.ask(|r| Command::SetAdmin(profile.into(), endpoint.into(), state, r))
            .await
    }

    /// Enables or disables a whole profile at runtime.
    pub async fn set_profile_enabled(&self, profile: &str, enabled: bool) -> Result<ProfileView, RequestError> {
        let view = self
            .ask(|r| Command::SetProfileEnabled(profile.into(), enabled, r))
            .await?;
        let mut views = [view];
        self.consumers.lock().await.fill_sinks(&mut views);
        let [view] = views;
        Ok(view)
    }

    /// Applies `config`, or re-reads the file the daemon was started with. The file is read
    /// and parsed here, on a blocking thread, not on the runner's: parsing a million endpoints
    /// takes seconds, and the runner keeps probing meanwhile. It runs to its end as a task of
    /// its own even when the caller gives up on it (an API client that hangs up): a reload the
    /// runner applied must have its consumers follow it.
    pub async fn reload(&self, config: Option<Config>) -> Result<ReloadReport, RequestError> {
        let control = self.clone();
        let report = tokio::spawn(async move { control.reload_whole(config).await })
            .await
            .map_err(|_| RequestError::Stopped)?;
        // The configuration a reload replaced was read on this thread at the start (the
        // caller's, for the API and SIGHUP) or on a blocking-pool thread for a reload, and its
        // last holder let it go here or on the runner's thread. Neither reader allocates again
        // soon, so its pages stayed resident: a configuration's worth (~25 MiB at 250k
        // endpoints) from the first reload on. Both hand them back (the pool's idle thread is
        // the one that read the last one).
        crate::alloc::release_freed();
        let _ = tokio::task::spawn_blocking(crate::alloc::release_freed).await;
        report
    }

    async fn reload_whole(&self, config: Option<Config>) -> Result<ReloadReport, RequestError> {
        let mut consumers = self.consumers.lock().await;
        let config = match (config, &self.config_path) {
            (Some(config), _) => config,
            (None, Some(path)) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || Config::load(&path))
                    .await
                    .map_err(|_| RequestError::Stopped)??
            }
            (None, None) => {
                return Err(RequestError::Refused(
                    "the daemon was started without a config file to re-read".into(),
                ))
            }
        };
        let (config, fleet) = self.carry_fleet(config).await?;
        let config = Arc::new(config);
        // What the consumers need (a sink its structure, the events file its place) is made
        // before the runner applies anything: if it fails, nothing changes.
        let prepared = consumers
            .prepare(&config)
            .map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?;
        let mut request = consumers.reload_joins(&config, &prepared);
        request.fleet = fleet.generations;
        consumers.mark_handovers(&config, true);
        let reloaded = match self.ask(|r| Command::Reload(Box::new(request), r)).await {
            Ok(reloaded) => reloaded,
            Err(e) => {
                consumers.mark_handovers(&config, false);
                return Err(e);
            }
        };
        let report = reloaded.report.clone();
        consumers.refollow(config.clone(), prepared, reloaded);
        self.forget_fleet(fleet.forgotten).await;
        self.follow_discovery(&config);
        Ok(report)
    }

    /// Applies a fleet batch to `profile` (one whose endpoints the API owns): checked by the
    /// file's rules off the runner, applied whole or not at all, written to the journal before
    /// the answer. Like a reload it runs to its end once begun, and one at a time with reloads.
    pub async fn fleet(
        &self,
        profile: &str,
        batch: crate::fleet::Batch,
    ) -> Result<crate::fleet::Applied, RequestError> {
        self.spawn_batch(profile, batch, false).await
    }

    /// A batch of a profile's discovery (`crate::discovery`): as `fleet`, for a profile whose
    /// endpoints come from DNS (and only for one).
    pub(crate) async fn fleet_discovered(
        &self,
        profile: &str,
        batch: crate::fleet::Batch,
    ) -> Result<crate::fleet::Applied, RequestError> {
        self.spawn_batch(profile, batch, true).await
    }

    /// Runs a batch as a task of its own: once begun it runs to its end, even when the caller
    /// gives up on it.
    async fn spawn_batch(
        &self,
        profile: &str,
        batch: crate::fleet::Batch,
        by_discovery: bool,
    ) -> Result<crate::fleet::Applied, RequestError> {
        let control = self.clone();
        let profile = profile.to_string();
        tokio::spawn(async move { control.fleet_batch(profile, batch, by_discovery).await })
            .await
            .map_err(|_| RequestError::Stopped)?
    }

    /// Starts, changes or stops the discoveries `config` asks for.
    pub(crate) fn follow_discovery(&self, config: &Config) {
        let asked = crate::discovery::asked(config);
        let mut running = self.discovery.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match running.as_ref() {
            Some(d) => d.follow(asked),
            None if asked.is_empty() => {}
            None => match crate::discovery::Discoveries::start(self.clone(), asked) {
                Ok(d) => *running = Some(d),
                Err(e) => log::error!("discovery: cannot start its thread: {e}; no profile's endpoints come from DNS"),
            },
        }
    }

    /// Each profile's discovery, as its task last saw it.
    fn fill_discovery(&self, views: &mut [ProfileView]) {
        let running = self.discovery.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(d) = running.as_ref() {
            for view in views {
                view.discovery = d.view(&view.name);
            }
        }
    }

    /// Ends the discoveries (before the runner stops): on a thread of the pool, since joining
    /// theirs blocks.
    pub(crate) async fn stop_discovery(&self) {
        let running = self
            .discovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(d) = running {
            let _ = tokio::task::spawn_blocking(move || d.stop()).await;
        }
    }

    async fn fleet_batch(
        &self,
        profile: String,
        batch: crate::fleet::Batch,
        by_discovery: bool,
    ) -> Result<crate::fleet::Applied, RequestError> {
        let mut consumers = self.consumers.lock().await;
        let names = batch.named();
        let lookup = self.ask(|r| Command::FleetLookup(profile.clone(), names, r)).await?;
        if let Some(expected) = batch.generation.filter(|&g| g != lookup.generation) {
            return Err(RequestError::Generation {
                profile,
                expected,
                current: lookup.generation,
            });
        }
        let generation = batch.generation;
        let ops = tokio::task::spawn_blocking(move || crate::fleet::check(&batch, &lookup))
            .await
            .map_err(|_| RequestError::Stopped)?
            .map_err(RequestError::BadBatch)?;
        let entry_ops = ops.clone();
        let request = FleetRequest {
            profile: profile.clone(),
            generation,
            ops,
            want_config: consumers.serves_dns(),
            by_discovery,
        };
        let done = self.ask(|r| Command::Fleet(Box::new(request), r)).await?;
        let applied = done.applied;
        if let Some(config) = done
            .config
            .filter(|_| applied.added + applied.changed + applied.removed > 0)
        {
            // The zone is built from the configuration: it follows the new endpoints from a
            // snapshot taken after them.
            if let Some(join) = consumers.dns_join() {
                let joined = self.ask(|r| Command::Join(vec![join], r)).await?;
                consumers.refollow_dns(&config, joined);
            }
        }
        if applied.added + applied.changed + applied.removed > 0 {
            if let Some(journal) = self.journal.clone() {
                let entry = crate::fleet::entry(&profile, applied.generation, &entry_ops);
                let written = tokio::task::spawn_blocking(move || {
                    journal
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .append(&entry)
                })
                .await
                .map_err(|_| RequestError::Stopped)?;
                if let Err(e) = written {
                    let why = crate::errors::chain(&e);
                    log::error!("fleet: profile {profile}: {why}");
                    return Err(RequestError::Unsaved(why));
                }
            }
        }
        Ok(applied)
    }

    /// Endpoints `offset..offset + limit` of `profile` as the fleet API reads and takes them,
    /// with its generation (0 and the file's endpoints for a profile the file owns). The runner
    /// copies them; they become JSON here.
    pub async fn fleet_view(
        &self,
        profile: &str,
        offset: usize,
        limit: usize,
    ) -> Result<crate::fleet::FleetView, RequestError> {
        let page = self
            .ask(|r| Command::FleetPage(profile.to_string(), (offset, limit), r))
            .await?;
        tokio::task::spawn_blocking(move || page.view())
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// The endpoints of `config`'s API profiles, which its file does not list: a running API
    /// profile's as they are (read again by its rules when the reload changed its check or
    /// routing), else the journal's; the generations they are at, and the API profiles the
    /// reload takes from the API.
    async fn carry_fleet(&self, mut config: Config) -> Result<(Config, CarriedFleet), RequestError> {
        let carried = self.ask(Command::FleetCarry).await?;
        let api = |p: &&crate::config::Profile| p.endpoints_from.at_run_time();
        let forgotten: Vec<String> = carried
            .iter()
            .filter(|c| !config.profiles.iter().filter(api).any(|p| p.name == c.name))
            .map(|c| c.name.clone())
            .collect();
        if !config.profiles.iter().any(|p| api(&p)) {
            return Ok((
                config,
                CarriedFleet {
                    generations: Vec::new(),
                    forgotten,
                },
            ));
        }
        let journal = self.journal.as_ref().map(|j| {
            j.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .path()
                .to_path_buf()
        });
        tokio::task::spawn_blocking(move || {
            let mut generations = Vec::new();
            let mut errors = Vec::new();
            let mut from_journal = None;
            for p in config.profiles.iter_mut().filter(|p| p.endpoints_from.at_run_time()) {
                let (endpoints, generation) = match carried.iter().find(|c| c.name == p.name) {
                    Some(c)
                        if (&c.settings.health, c.settings.dialect, c.settings.routing)
                            == (&p.health, p.dialect, p.routing) =>
                    {
                        (Ok(c.endpoints.clone()), c.generation)
                    }
                    Some(c) => {
                        let items: Vec<_> = c.endpoints.iter().map(crate::config::api_item).collect();
                        (crate::fleet::readmit(p, items.iter()), c.generation)
                    }
                    None => {
                        let fleet = match (&mut from_journal, &journal) {
                            (Some(f), _) => f,
                            (None, Some(path)) => {
                                from_journal.insert(crate::fleet::journal::read_file(path).unwrap_or_else(|e| {
                                    log::warn!(
                                        "{}: the reload's new API profiles start empty",
                                        crate::errors::chain(&e)
                                    );
                                    crate::fleet::journal::Fleet::default()
                                }))
                            }
                            (None, None) => from_journal.insert(crate::fleet::journal::Fleet::default()),
                        };
                        match fleet.get(&p.name) {
                            Some(held) => (crate::fleet::readmit(p, held.items.values()), held.generation),
                            None => (Ok(Vec::new()), 0),
                        }
                    }
                };
                match endpoints {
                    Ok(e) => p.endpoints = e,
                    Err(e) => errors.push(format!(
                        "profile {:?}: the endpoints the API gave it break its new rules:\n{e}",
                        p.name
                    )),
                }
                generations.push((p.name.clone(), generation));
            }
            if errors.is_empty() {
                Ok((config, CarriedFleet { generations, forgotten }))
            } else {
                Err(RequestError::Refused(errors.join("\n")))
            }
        })
        .await
        .map_err(|_| RequestError::Stopped)?
    }

    /// After a reload that took these profiles from the API (removed, or their endpoints the
    /// file's now): the journal forgets their endpoints.
    async fn forget_fleet(&self, forgotten: Vec<String>) {
        let Some(journal) = self.journal.clone().filter(|_| !forgotten.is_empty()) else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || {
            let mut journal = journal.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for profile in forgotten {
                let entry = crate::fleet::journal::Entry {
                    profile: profile.clone(),
                    reset: true,
                    ..Default::default()
                };
                if let Err(e) = journal.append(&entry) {
                    log::warn!("fleet: profile {profile}: {}", crate::errors::chain(&e));
                }
            }
        })
        .await;
    }

    /// Joins the change stream: the state of every endpoint and profile now, and every change
    /// after it, in order. `capacity` bounds how many distinct endpoints and profiles may wait
    /// in the queue; a consumer slower than that loses changes (counted, and told so).
    pub async fn subscribe(&self, name: &str, capacity: usize) -> Result<(Snapshot, Subscription), RequestError> {
        let join = Join {
            follower: Follower::Feed(name.into()),
            capacity,
            profile: None,
            snapshot: true,
        };
        let joined = self.ask(|r| Command::Join(vec![join], r)).await?;
        let joined = joined.into_iter().next().ok_or(RequestError::Stopped)?;
        Ok((joined.snapshot, joined.changes))
    }

    /// This node's place in the cluster and what every node says.
    pub async fn cluster(&self) -> Result<super::views::ClusterView, RequestError> {
        self.ask(Command::Cluster).await
    }

    /// Every sink: what it follows, what it holds, how its last syncs went.
    pub async fn sinks(&self) -> Result<Vec<crate::sinks::SinkView>, RequestError> {
        if self.tx.is_closed() {
            return Err(RequestError::Stopped);
        }
        Ok(self.consumers.lock().await.sink_views())
    }

    /// Reopens the events file (after logrotate moved it): later events go to a new file at
    /// the configured path. Like a reload, it runs to its end once begun.
    pub async fn reopen_events(&self) -> Result<(), RequestError> {
        let control = self.clone();
        tokio::spawn(async move {
            let mut consumers = control.consumers.lock().await;
            let Some((sink, join)) = consumers
                .reopen_events()
                .map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?
            else {
                return Ok(());
            };
            let joined = control.ask(|r| Command::Join(vec![join], r)).await?;
            consumers.switch_events(sink, joined);
            Ok(())
        })
        .await
        .map_err(|_| RequestError::Stopped)?
    }

    /// The Prometheus exposition text.
    pub async fn metrics(&self) -> Result<String, RequestError> {
        let (mut text, engine) = self.ask(Command::Metrics).await?;
        if let Some(engine) = engine {
            let kernel = tokio::task::spawn_blocking(move || crate::metrics::kernel::render(&engine))
                .await
                .unwrap_or_default();
            text.push_str(&kernel);
        }
        text.push_str(&self.consumers.lock().await.render_metrics());
        Ok(text)
    }
}

impl crate::discovery::Fleet for Control {
    type Error = RequestError;

    async fn endpoints(&self, profile: &str) -> Result<crate::fleet::FleetView, RequestError> {
        self.fleet_view(profile, 0, usize::MAX).await
    }

    async fn apply(&self, profile: &str, batch: crate::fleet::Batch) -> Result<crate::fleet::Applied, RequestError> {
        self.fleet_discovered(profile, batch).await
    }
}
