//! `[daemon]`: the process, its API and its events file.
use std::{net::SocketAddr, path::PathBuf};

use serde::Serialize;

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Daemon {
    pub api: Api,
    pub events: EventsOutput,
    pub pin_dir: PathBuf,
    /// Last known health per endpoint, so a restart resumes instead of starting over.
    pub state_file: PathBuf,
    /// Threads that run HTTP(S) and UDP request/response probes; None: one per core.
    pub l7_workers: Option<u16>,
    /// Where plain HTTP checks run.
    pub http_probes: HttpProbes,
}

/// `http_probes` of `[daemon]`: where plain HTTP checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpProbes {
    /// In probe_rx, without a socket, for every check that allows it (plain HTTP, the status
    /// alone decides, a request of at most 256 bytes); the others through sockets.
    Kernel,
    /// Every HTTP check through a socket of its own.
    Sockets,
}

impl HttpProbes {
    pub const NAMES: [&str; 2] = ["kernel", "sockets"];
}

impl Daemon {
    /// The most L7 worker threads `l7_workers` may ask for.
    pub const MAX_L7_WORKERS: u16 = 256;
}

/// The `api_*` keys of `[daemon]`: where the API listens and who may change state through it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Api {
    pub listen: ApiListen,
    /// Unix socket: the group that owns it and whose members may use mutating routes.
    pub socket_group: ApiGroup,
    /// Unix socket: its file mode (0o600..=0o777, owner read and write always set).
    pub socket_mode: u32,
    /// TCP: the file holding the bearer token mutating routes require; none means mutating
    /// routes are refused over TCP.
    pub token_file: Option<PathBuf>,
}

impl Api {
    /// The group a unix socket gets when the file names none.
    pub const DEFAULT_GROUP: &'static str = "probed";
    pub const DEFAULT_SOCKET_MODE: u32 = 0o660;
    pub const DEFAULT_SOCKET: &'static str = "/run/probed/api.sock";

    /// The default: the unix socket, group `probed`, mode 0660.
    pub fn new(listen: ApiListen) -> Self {
        Self {
            listen,
            socket_group: ApiGroup::Default,
            socket_mode: Self::DEFAULT_SOCKET_MODE,
            token_file: None,
        }
    }

    /// The keys whose values differ in `new`; a reload names them as needing a restart.
    pub fn changed_keys<'a>(&'a self, new: &'a Api) -> impl Iterator<Item = &'static str> + 'a {
        [
            ("api_listen", self.listen != new.listen),
            ("api_socket_group", self.socket_group != new.socket_group),
            ("api_socket_mode", self.socket_mode != new.socket_mode),
            ("api_token_file", self.token_file != new.token_file),
        ]
        .into_iter()
        .filter_map(|(k, changed)| changed.then_some(k))
    }
}

/// Where the API listens. Remote TCP addresses only pass validation with `api_allow_remote`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ApiListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// The group of the API socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ApiGroup {
    /// Not set: `probed` if that group exists, else the socket is owner-only (0600).
    Default,
    /// A group name, looked up at start; a missing one stops the start.
    Name(String),
    /// A numeric gid, used as is.
    Gid(u32),
}

/// Where transition events go, one JSON line each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum EventsOutput {
    Stdout,
    File(PathBuf),
}
