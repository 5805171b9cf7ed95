//! The runner's protocol: the requests (`Command`) its one thread serves, their replies and
//! errors. `Control` sends them; `requests/` answers them; the consumers build the reload's.
use std::{net::IpAddr, sync::Arc};

use tokio::sync::oneshot;

use super::views::{EndpointView, ProfileView, ReloadReport, SelectView};
use crate::{
    changes::{Follower, Join, Joined},
    config::{Config, ConfigErrors},
    dns::regions::Regions,
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
    #[error(
        "profile {0:?} takes its endpoints from the file (endpoints_from = \"file\"): change them there and \
         reload, or set endpoints_from = \"api\""
    )]
    NotApi(String),
    #[error(
        "profile {0:?} takes its endpoints from DNS (endpoints_from = \"dns\"): change its records, or set \
         endpoints_from = \"api\""
    )]
    Discovered(String),
    #[error(
        "profile {profile:?} is at generation {current}, not {expected}: another change came first; read the \
         endpoints again (GET /v1/profiles/{profile}/endpoints) and send the batch against that generation"
    )]
    Generation {
        profile: String,
        expected: u64,
        current: u64,
    },
    #[error("the batch was refused; nothing of it was applied:\n{0}")]
    BadBatch(ConfigErrors),
    #[error("the batch was applied, but not written to the fleet journal ({0}): a restart would lose it")]
    Unsaved(String),
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
    /// The regions are the consumers' (the DNS server's): `/v1/select` places a source as
    /// the DNS server would.
    Select(String, SelectQuery, Arc<Regions>, Reply<SelectView>),
    SetAdmin(String, String, AdminState, Reply<EndpointView>),
    SetProfileEnabled(String, bool, Reply<ProfileView>),
    Reload(Box<ReloadRequest>, Reply<Reloaded>),
    Metrics(Reply<MetricsReply>),
    Join(Vec<Join>, Reply<Vec<Joined>>),
    Cluster(Reply<super::views::ClusterView>),
    /// What the node's route sinks announce now, for the cluster's gossip (from the sinks'
    /// threads; no reply).
    Routes(Vec<crate::cluster::routes::Announcement>),
    /// What a fleet batch for a profile is checked against (the names it changes).
    FleetLookup(String, Vec<String>, Reply<crate::fleet::Lookup>),
    Fleet(Box<FleetRequest>, Reply<FleetDone>),
    /// The running profiles the API owns, for a reload to carry over.
    FleetCarry(Reply<Vec<Carried>>),
    /// A page (offset, limit) of a profile's endpoints for the fleet API's view.
    FleetPage(String, (usize, usize), Reply<crate::fleet::FleetPage>),
}

/// A reload as the runner applies it: the configuration, and how its consumers follow it.
pub(crate) struct ReloadRequest {
    pub config: Arc<Config>,
    /// Joined just before the new table goes live, so they see the reload's own changes:
    /// the events file a reload moves.
    pub before: Vec<Join>,
    /// Joined from the new table's state: sinks new or changed, the DNS zone.
    pub after: Vec<Join>,
    /// Followers the configuration no longer has (sinks removed): their streams end once the
    /// new table's changes are in them.
    pub close: Vec<Follower>,
    /// The generations of the configuration's API profiles.
    pub fleet: Vec<(String, u64)>,
}

/// What a reload made: its report and the consumers' new starts (as `ReloadRequest` asked).
pub(crate) struct Reloaded {
    pub report: ReloadReport,
    pub before: Vec<Joined>,
    pub after: Vec<Joined>,
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

/// A checked batch for the runner.
pub(crate) struct FleetRequest {
    pub profile: String,
    /// Apply only at this generation.
    pub generation: Option<u64>,
    pub ops: Vec<crate::fleet::Op>,
    /// Send the configuration back (the DNS zone is rebuilt from it).
    pub want_config: bool,
    /// From the profile's discovery (`crate::discovery`), not the API: only a profile whose
    /// endpoints come from DNS takes it, and only such a batch changes one.
    pub by_discovery: bool,
}

/// What a batch did, and the configuration after it when asked.
pub(crate) struct FleetDone {
    pub applied: crate::fleet::Applied,
    pub config: Option<Arc<Config>>,
}

/// A profile of the running configuration the API owns, as a reload carries it into the new
/// one: its endpoints, generation and settings.
pub(crate) struct Carried {
    pub name: String,
    pub endpoints: Vec<crate::config::Endpoint>,
    pub generation: u64,
    pub settings: crate::config::Profile,
}
