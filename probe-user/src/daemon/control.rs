//! The one way into the runner: `Control` sends a `Command` and awaits its reply. The API, the
//! signal handlers, the tests and (later) the sinks depend on this file, never on the runner.
use crate::changes::{Snapshot, Subscription};
use std::{net::IpAddr, sync::Arc};

use tokio::sync::{mpsc, oneshot};

use super::views::{EndpointView, ProfileView, ReloadReport, SelectView};
use crate::{
    config::{Config, ConfigErrors},
    engine::L4Engine,
    status::{AdminState, Family},
};

/// Why a request could not be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("no profile named {0:?}")]
    NoProfile(String),
    #[error("profile {profile:?} has no endpoint named {endpoint:?}")]
    NoEndpoint { profile: String, endpoint: String },
    #[error("the new configuration was refused; the running one is unchanged:\n{0}")]
    Refused(String),
    #[error("the daemon has stopped")]
    Stopped,
    #[error("this daemon runs alone: its configuration has no [cluster]")]
    NoCluster,
}

impl From<ConfigErrors> for RequestError {
    fn from(e: ConfigErrors) -> Self {
        RequestError::Refused(e.to_string())
    }
}

pub(crate) type Reply<T> = oneshot::Sender<Result<T, RequestError>>;

/// What a metrics scrape gets from the runner: its own text, and the engine whose kernel
/// counters the caller reads off the runner's thread.
pub(crate) type MetricsReply = (String, Option<Arc<L4Engine>>);

/// A request to the runner; one handler per variant under `requests/`.
pub(crate) enum Command {
    /// Profiles (all, or one), and with (offset, limit) one page of each one's endpoints.
    Status(Option<String>, Option<(usize, usize)>, Reply<Vec<ProfileView>>),
    Endpoint(String, String, Reply<EndpointView>),
    Select(String, SelectQuery, Reply<SelectView>),
    SetAdmin(String, String, AdminState, Reply<EndpointView>),
    SetProfileEnabled(String, bool, Reply<ProfileView>),
    Reload(Option<Box<Config>>, Reply<ReloadReport>),
    Metrics(Reply<MetricsReply>),
    Subscribe(SubscribeRequest, Reply<(Snapshot, Subscription)>),
    Sinks(Reply<Vec<crate::sinks::SinkView>>),
    ReopenEvents(Reply<()>),
    Cluster(Reply<super::views::ClusterView>),
}

/// What `GET /v1/select` asks: the query a DNS client at `source` would send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectQuery {
    pub source: IpAddr,
    /// The source's region; None: the `[[dns.region]]` that holds `source`, if any.
    pub region: Option<String>,
    /// Only endpoints of this family (an A or AAAA query); None: every endpoint.
    pub family: Option<Family>,
}

/// A new consumer of the change stream.
pub(crate) struct SubscribeRequest {
    pub name: String,
    pub capacity: usize,
}

/// A cheap, cloneable handle to the running daemon.
#[derive(Clone)]
pub struct Control {
    pub(crate) tx: mpsc::Sender<Command>,
    /// The file a reload without a config re-reads (`Options::config_path`).
    pub(crate) config_path: Option<Arc<std::path::Path>>,
}

impl Control {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, RequestError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)?
    }

    /// Every profile.
    pub async fn status(&self) -> Result<Vec<ProfileView>, RequestError> {
        self.ask(|r| Command::Status(None, None, r)).await
    }

    /// One profile.
    pub async fn profile(&self, profile: &str) -> Result<ProfileView, RequestError> {
        let mut views = self.ask(|r| Command::Status(Some(profile.into()), None, r)).await?;
        views.pop().ok_or_else(|| RequestError::NoProfile(profile.into()))
    }

    /// Every profile (all, or the one named) with `limit` of its endpoints from `offset`.
    pub async fn status_page(
        &self,
        profile: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ProfileView>, RequestError> {
        self.ask(|r| Command::Status(profile.map(str::to_string), Some((offset, limit)), r))
            .await
    }

    /// One endpoint: the GetHealthStatus of SPEC section 5.
    pub async fn endpoint(&self, profile: &str, endpoint: &str) -> Result<EndpointView, RequestError> {
        self.ask(|r| Command::Endpoint(profile.into(), endpoint.into(), r))
            .await
    }

    /// Which endpoints would answer `query` now: what the DNS server answers the same source.
    pub async fn select(&self, profile: &str, query: SelectQuery) -> Result<SelectView, RequestError> {
        self.ask(|r| Command::Select(profile.into(), query, r)).await
    }

    /// Enables, disables or sets an endpoint to always-serve at runtime.
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
        self.ask(|r| Command::SetProfileEnabled(profile.into(), enabled, r))
            .await
    }

    /// Applies `config`, or re-reads the file the daemon was started with. The file is read
    /// and parsed here, on a blocking thread, not on the runner's: parsing a million endpoints
    /// takes seconds, and the runner keeps probing meanwhile.
    pub async fn reload(&self, config: Option<Config>) -> Result<ReloadReport, RequestError> {
        let config = match (config, &self.config_path) {
            (None, Some(path)) => {
                let path = path.clone();
                let read = tokio::task::spawn_blocking(move || Config::load(&path))
                    .await
                    .map_err(|_| RequestError::Stopped)?;
                Some(read?)
            }
            (config, _) => config,
        };
        let report = self.ask(|r| Command::Reload(config.map(Box::new), r)).await;
        // The runner has dropped the configuration it replaced, whose pages belong to the
        // thread that read it: this one at start (the caller's, for the API and SIGHUP), a
        // blocking-pool thread for a reload. Neither allocates again soon, so the pages stayed
        // resident: a configuration's worth (~25 MiB at 250k endpoints) from the first reload
        // on. Both hand them back (the pool's idle thread is the one that read the last one).
        crate::alloc::release_freed();
        let _ = tokio::task::spawn_blocking(crate::alloc::release_freed).await;
        report
    }

    /// Joins the change stream: the state of every endpoint and profile now, and every change
    /// after it, in order. `capacity` bounds how many distinct endpoints and profiles may wait
    /// in the queue; a consumer slower than that loses changes (counted, and told so).
    pub async fn subscribe(&self, name: &str, capacity: usize) -> Result<(Snapshot, Subscription), RequestError> {
        let request = SubscribeRequest {
            name: name.into(),
            capacity,
        };
        self.ask(|r| Command::Subscribe(request, r)).await
    }

    /// This node's place in the cluster and what every node says.
    pub async fn cluster(&self) -> Result<super::views::ClusterView, RequestError> {
        self.ask(Command::Cluster).await
    }

    /// Every sink: what it follows, what it holds, how its last syncs went.
    pub async fn sinks(&self) -> Result<Vec<crate::sinks::SinkView>, RequestError> {
        self.ask(Command::Sinks).await
    }

    /// Reopens the events file (after logrotate moved it): later events go to a new file at
    /// the configured path.
    pub async fn reopen_events(&self) -> Result<(), RequestError> {
        self.ask(Command::ReopenEvents).await
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
        Ok(text)
    }
}
