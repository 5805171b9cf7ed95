//! The daemon: turns a `Config` into running health checks. `Daemon::start` spawns the runner
//! (scheduler, probers, trackers, status) and the API; everything talks to the runner through
//! `Control`, so the runner owns all state and needs no locks.
pub mod checks;
pub mod events;
pub mod runner;
pub mod state;
pub mod view;

use std::{net::IpAddr, path::PathBuf, time::Duration};

use tokio::sync::{mpsc, oneshot};

pub use view::{EndpointView, ProfileView, ReloadReport, SelectView};

use crate::{
    config::{Config, ConfigErrors},
    engine::EngineError,
    status::AdminState,
};

/// Errors starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("start the L4 engine on {iface}")]
    Engine {
        iface: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error("no interface to send TCP/UDP probes from: set source.interfaces (the route to {target} names none)")]
    NoInterface { target: std::net::SocketAddr },
    #[error("{0}")]
    Unsupported(String),
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the daemon has stopped")]
    Stopped,
}

/// Why an API request could not be served.
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
}

impl From<ConfigErrors> for RequestError {
    fn from(e: ConfigErrors) -> Self {
        RequestError::Refused(e.to_string())
    }
}

/// Settings that do not come from the config file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Re-read on reload requests that carry no config (SIGHUP, `POST /v1/reload`).
    pub config_path: Option<PathBuf>,
    /// Do not start the API server (tests that drive `Control` directly).
    pub no_api: bool,
}

type Reply<T> = oneshot::Sender<Result<T, RequestError>>;

/// A request to the runner.
pub(crate) enum Command {
    Status(Option<String>, Reply<Vec<ProfileView>>),
    Endpoint(String, String, Reply<EndpointView>),
    Select(String, IpAddr, Option<String>, Reply<SelectView>),
    SetAdmin(String, String, AdminState, Reply<EndpointView>),
    Reload(Option<Box<Config>>, Reply<ReloadReport>),
    Metrics(Reply<(String, Option<std::sync::Arc<crate::engine::L4Engine>>)>),
}

/// A cheap, cloneable handle to the running daemon.
#[derive(Clone)]
pub struct Control {
    tx: mpsc::Sender<Command>,
}

impl Control {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, RequestError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)?
    }

    /// Every profile, or one.
    pub async fn status(&self, profile: Option<String>) -> Result<Vec<ProfileView>, RequestError> {
        self.ask(|r| Command::Status(profile, r)).await
    }

    /// One endpoint: the GetHealthStatus of SPEC section 5.
    pub async fn endpoint(&self, profile: &str, endpoint: &str) -> Result<EndpointView, RequestError> {
        self.ask(|r| Command::Endpoint(profile.into(), endpoint.into(), r))
            .await
    }

    /// Which endpoints would answer a query from `source` now.
    pub async fn select(
        &self,
        profile: &str,
        source: IpAddr,
        region: Option<String>,
    ) -> Result<SelectView, RequestError> {
        self.ask(|r| Command::Select(profile.into(), source, region, r)).await
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

    /// Applies `config`, or re-reads the file the daemon was started with.
    pub async fn reload(&self, config: Option<Config>) -> Result<ReloadReport, RequestError> {
        self.ask(|r| Command::Reload(config.map(Box::new), r)).await
    }

    /// The Prometheus exposition text.
    pub async fn metrics(&self) -> Result<String, RequestError> {
        let (mut text, engine) = self.ask(Command::Metrics).await?;
        if let Some(engine) = engine {
            let kernel = tokio::task::spawn_blocking(move || runner::render_kernel(&engine))
                .await
                .unwrap_or_default();
            text.push_str(&kernel);
        }
        Ok(text)
    }
}

/// A running daemon: the runner task and, unless disabled, the API server.
pub struct Daemon {
    control: Control,
    stop: Option<oneshot::Sender<()>>,
    /// The runner's result, once it ends.
    done: oneshot::Receiver<Result<(), DaemonError>>,
    thread: Option<std::thread::JoinHandle<()>>,
    api: Option<crate::api::Server>,
}

impl Daemon {
    /// Starts everything; call it inside a tokio runtime, in the network namespace of the
    /// probe interface. Nothing is left running when it fails.
    pub async fn start(config: Config, options: Options) -> Result<Daemon, DaemonError> {
        let (tx, rx) = mpsc::channel(64);
        let control = Control { tx };
        let api_listen = config.daemon.api.clone();
        let runner = runner::Runner::new(config, options.clone())?;
        let (stop, stop_rx) = oneshot::channel();
        let api = if options.no_api {
            None
        } else {
            match crate::api::Server::start(&api_listen, control.clone()).await {
                Ok(s) => Some(s),
                Err(e) => {
                    drop(runner);
                    return Err(e);
                }
            }
        };
        // The runner gets a thread and a runtime of its own: API requests (a status of 10,000
        // endpoints is megabytes of JSON) must never delay a probe. A thread inherits the
        // caller's network namespace, so probes still leave from the right one.
        let (done_tx, done) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("probed-runner".into())
            .spawn(move || {
                let result = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt.block_on(runner.run(rx, stop_rx)),
                    Err(source) => Err(DaemonError::Io {
                        op: "start the runner's runtime",
                        path: String::new(),
                        source,
                    }),
                };
                let _ = done_tx.send(result);
            })
            .map_err(|source| DaemonError::Io {
                op: "spawn the runner thread",
                path: String::new(),
                source,
            })?;
        Ok(Daemon {
            control,
            stop: Some(stop),
            done,
            thread: Some(thread),
            api,
        })
    }

    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Where the API listens, when it runs.
    pub fn api_addr(&self) -> Option<String> {
        self.api.as_ref().map(|a| a.addr())
    }

    /// Waits until the runner ends by itself (it only does on an error).
    pub async fn wait(&mut self) -> Result<(), DaemonError> {
        (&mut self.done).await.map_err(|_| DaemonError::Stopped)?
    }

    /// Stops probing, saves the last known health, detaches the programs and removes the pins
    /// and the API socket; returns once all of that is done.
    pub async fn shutdown(mut self) -> Result<(), DaemonError> {
        if let Some(api) = self.api.take() {
            api.stop().await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(10), &mut self.done).await {
            Ok(Ok(r)) => {
                if let Some(t) = self.thread.take() {
                    // It has sent its result and is returning: the join does not block long.
                    let _ = t.join();
                }
                r
            }
            Ok(Err(_)) | Err(_) => Err(DaemonError::Stopped),
        }
    }
}

pub(crate) use crate::clock::ms;
pub use crate::clock::{mono_ns, unix_ms, unix_ms_at};
