//! The daemon under test: `Daemon::start` on a thread that joined the prober namespace, with
//! its API on a unix socket (reachable from the test, whatever the namespace), events in a file
//! and a private pin directory and state file. Stopped (gracefully) on drop.
use std::{
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use probed::{
    api::client,
    config::Config,
    daemon::{events::Event, views::ChangeKind, Daemon, EndpointView, Options},
    status::EndpointStatus,
};
use serde_json::Value;

use crate::{unique_name, Netns, TestPins};

/// Paths one daemon uses; kept across restarts of the daemon in one test.
pub struct DaemonFiles {
    pub dir: PathBuf,
    pub pins: TestPins,
}

impl DaemonFiles {
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(unique_name("probed-daemon-"));
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            dir,
            pins: TestPins::new(),
        }
    }

    pub fn api(&self) -> String {
        format!("unix:{}", self.dir.join("api.sock").display())
    }

    pub fn events(&self) -> PathBuf {
        self.dir.join("events.jsonl")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("probed.toml")
    }

    /// The `[daemon]` and `[source]` sections for this test; profiles follow.
    pub fn header(&self, iface: &str) -> String {
        format!(
            "[daemon]\napi_listen = \"{}\"\nevents = \"{}\"\npin_dir = \"{}\"\nstate_file = \"{}\"\n\n\
             [source]\ninterfaces = [\"{iface}\"]\n\n",
            self.api(),
            self.events().display(),
            self.pins.path.display(),
            self.state().display()
        )
    }

    /// The header for `iface`, then one lb profile per `(name, ports)` with a fast TCP check
    /// (100 ms, thresholds 2) and an endpoint `NAME-1`, `NAME-2`, ... per port at `address`.
    pub fn tcp_profiles(&self, iface: &str, address: &str, profiles: &[(&str, &[u16])]) -> String {
        let health = "[profile.health]\nprotocol = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                      healthy_threshold = 2\nunhealthy_threshold = 2\n";
        let mut text = self.header(iface);
        for (profile, ports) in profiles {
            text += &format!("\n[[profile]]\nname = \"{profile}\"\ndialect = \"lb\"\n{health}");
            for (i, port) in ports.iter().enumerate() {
                text += &format!(
                    "\n[[profile.endpoint]]\nname = \"{profile}-{}\"\naddress = \"{address}\"\nport = {port}\n",
                    i + 1
                );
            }
        }
        text
    }

    /// Writes the config file and parses it, panicking with every error.
    pub fn write_config(&self, text: &str) -> Config {
        std::fs::write(self.config_path(), text).unwrap();
        Config::load(self.config_path()).unwrap_or_else(|e| panic!("test config is invalid:\n{e}\n{text}"))
    }
}

impl Default for DaemonFiles {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for DaemonFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A daemon running in a namespace.
pub struct RunningDaemon {
    pub api: String,
    events: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl RunningDaemon {
    /// Starts `config` inside `ns`; the file at `config_path` is what reloads re-read.
    pub fn start(ns: &Netns, config: Config, config_path: Option<&Path>) -> Result<Self, String> {
        let file = File::open(ns.path()).unwrap();
        let events = match &config.daemon.events {
            probed::config::EventsOutput::File(p) => p.clone(),
            probed::config::EventsOutput::Stdout => PathBuf::new(),
        };
        let options = Options {
            config_path: config_path.map(Path::to_path_buf),
        };
        let api_listen = config.daemon.api.clone();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            // SAFETY: `file` is an open namespace file; setns changes only this thread, which
            // ends when the daemon does.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let daemon = match Daemon::start(config, options).await {
                    Ok(d) => d,
                    Err(e) => {
                        let msg = probed::errors::chain(&e);
                        let _ = ready_tx.send(Err(msg.clone()));
                        return Err(msg);
                    }
                };
                // The API beside the core, as `probed run` starts it.
                let api = match probed::api::Server::start(&api_listen, daemon.control()).await {
                    Ok(api) => api,
                    Err(e) => {
                        let _ = daemon.shutdown().await;
                        let _ = ready_tx.send(Err(e.to_string()));
                        return Err(e.to_string());
                    }
                };
                let _ = ready_tx.send(Ok(api.addr()));
                let _ = stop_rx.await;
                api.stop().await;
                daemon.shutdown().await.map_err(|e| e.to_string())
            })
        });
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(api)) => Ok(Self {
                api,
                events,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => panic!("the daemon did not start within 20 s"),
        }
    }

    /// Stops the daemon and waits for it; panics if it did not stop cleanly.
    pub fn stop(mut self) {
        self.stop_inner().unwrap_or_else(|e| panic!("daemon shutdown: {e}"));
    }

    fn stop_inner(&mut self) -> Result<(), String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| "the daemon thread panicked".to_string())?,
            None => Ok(()),
        }
    }

    /// `method path` against the API: status code and JSON (or text as a JSON string).
    pub fn call(&self, method: &str, path: &str) -> (u16, Value) {
        let r = client::request(&self.api, method, path)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}: {:?}", std::error::Error::source(&e)));
        let v = serde_json::from_str(&r.body).unwrap_or(Value::String(r.body));
        (r.status, v)
    }

    /// `method path` with `body` as JSON: status code and JSON (or text as a JSON string).
    pub fn call_with(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let r = client::Client::new(&self.api)
            .request_with(method, path, body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}: {:?}", std::error::Error::source(&e)));
        let v = serde_json::from_str(&r.body).unwrap_or(Value::String(r.body));
        (r.status, v)
    }

    pub fn get(&self, path: &str) -> Value {
        let (code, v) = self.call("GET", path);
        assert_eq!(code, 200, "GET {path}: {v}");
        v
    }

    pub fn endpoint(&self, profile: &str, endpoint: &str) -> EndpointView {
        serde_json::from_value(self.get(&format!("/v1/status/{profile}/{endpoint}"))).unwrap()
    }

    /// Polls until the endpoint's monitor status is `status`; panics with the last view after
    /// `within`.
    pub fn wait_status(&self, profile: &str, endpoint: &str, status: EndpointStatus, within: Duration) -> EndpointView {
        let deadline = Instant::now() + within;
        loop {
            let v = self.endpoint(profile, endpoint);
            if v.status == status {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "{profile}/{endpoint} is {} after {within:?}, expected {status}: {v:#?}",
                    v.status
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every event written so far.
    pub fn events(&self) -> Vec<Event> {
        read_events(&self.events)
    }

    /// Waits for a health change of `endpoint` to status `to`, returning it.
    pub fn wait_event(&self, endpoint: &str, to: EndpointStatus, within: Duration) -> Event {
        let deadline = Instant::now() + within;
        loop {
            let found = self
                .events()
                .into_iter()
                .find(|e| e.endpoint == endpoint && e.kind == ChangeKind::Health && e.to == Some(to));
            if let Some(e) = found {
                return e;
            }
            if Instant::now() > deadline {
                panic!("no event {endpoint} -> {to:?} within {within:?}: {:#?}", self.events());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// The reason of `view`'s last result ("" before any).
pub fn last_reason(view: &EndpointView) -> String {
    view.last_result
        .as_ref()
        .map(|r| r.reason.to_string())
        .unwrap_or_default()
}

/// Events in a JSON-lines file.
pub fn read_events(path: &Path) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l}: {e}")))
        .collect()
}

/// CLOCK_MONOTONIC in nanoseconds, as the daemon and its events use it.
pub fn mono_ns() -> u64 {
    probed::clock::mono_ns()
}

/// The value of one series in Prometheus text (`series` includes its labels).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no series {series}"))
}

/// The upper bound of the histogram bucket holding quantile `q` (what a bucketed histogram
/// can say: "at most this").
pub fn histogram_quantile(metrics: &str, name: &str, q: f64) -> f64 {
    bucket_quantile(&histogram_buckets(metrics, name), q)
}

/// As `histogram_quantile`, over the observations made between two scrapes.
pub fn histogram_quantile_between(before: &str, after: &str, name: &str, q: f64) -> f64 {
    let old = histogram_buckets(before, name);
    let delta: Vec<(f64, f64)> = histogram_buckets(after, name)
        .into_iter()
        .map(|(le, c)| {
            let was = old.iter().find(|(l, _)| *l == le).map_or(0.0, |b| b.1);
            (le, c - was)
        })
        .collect();
    bucket_quantile(&delta, q)
}

/// A histogram's cumulative buckets: (upper bound, count).
fn histogram_buckets(metrics: &str, name: &str) -> Vec<(f64, f64)> {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&format!("{name}_bucket{{le=\""))?;
            let (le, count) = rest.split_once("\"} ")?;
            Some((le.parse().unwrap_or(f64::INFINITY), count.parse().ok()?))
        })
        .collect()
}

fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    buckets.iter().find(|(_, c)| *c >= q * total).map_or(f64::NAN, |b| b.0)
}
