//! The haproxy sink: one backend of a running HAProxy, driven through its admin socket. Each
//! followed server is `ready` while its endpoint is eligible and `maint` (or `drain`) while it
//! is not, at the endpoint's weight; an endpoint the operator drains is `drain` while its
//! health holds (HAProxy keeps its sessions). Servers no endpoint names are left alone.
//!
//! Every sync and read-back starts from `show servers state BACKEND`, so what HAProxy holds
//! decides what is written: a restarted HAProxy (all servers back to haproxy.cfg's state) is
//! found different by the next read-back and set right, and a restart of probed with the
//! same health writes nothing.
//!
//! The socket is used one line per connection (HAProxy's non-interactive mode): several
//! commands joined by `;`, one answer each, then HAProxy closes. No connection outlives a
//! request, so nothing goes stale when HAProxy restarts, and no prompt has to be parsed.
//!
//! Whatever listens on the socket, a request ends within `IO_TIMEOUT` and reads at most
//! `MAX_ANSWER` bytes: a peer that trickles, floods or never accepts fails the request like any
//! other error (the sink retries with backoff), and the sink's thread goes on.
pub mod config;

pub use config::KEYS;
use std::{
    collections::BTreeMap,
    fmt,
    io::{ErrorKind, Read, Write},
    os::unix::{fs::FileTypeExt, net::UnixStream},
    time::{Duration, Instant},
};

use self::config::{HaproxyDown, HaproxySink as Config};
use super::{Sink, SinkError, SinkFault, SyncReport};
use crate::{
    sinks::model::ProfileModel,
    status::{AdminState, EndpointStatus},
};

/// A request HAProxy has not answered whole in this long, from connect to end of answer, fails
/// (and is retried), so a stuck HAProxy never holds the sink's thread.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest answer read. The longest the sink asks for is `show servers state BACKEND`: a
/// version line, a header and one line per server of one backend, about 110 bytes a server and
/// under 700 with the longest names, FQDN and SRV record. 16 MiB holds more than 24,000 such
/// servers (150,000 typical ones), beyond any backend; longer is not HAProxy answering.
const MAX_ANSWER: usize = 16 << 20;
/// HAProxy reads one command line into a buffer of `tune.bufsize` (16 kB by default); a sync
/// of many servers is cut into lines well under it.
const MAX_LINE: usize = 8000;
/// Flags of `srv_admin_state` that `set server ... state` sets: forced maintenance and forced
/// drain. The others (inherited, from the config, from DNS) are not probed's to change.
const ADMIN_FMAINT: u32 = 0x01;
const ADMIN_FDRAIN: u32 = 0x08;

/// What `set server B/S state` last left a server in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    Ready,
    Maint,
    Drain,
}

impl ServerState {
    fn name(self) -> &'static str {
        match self {
            ServerState::Ready => "ready",
            ServerState::Maint => "maint",
            ServerState::Drain => "drain",
        }
    }

    /// From `srv_admin_state`: forced maintenance wins over drain, as in HAProxy.
    fn from_admin_flags(flags: u32) -> ServerState {
        if flags & ADMIN_FMAINT != 0 {
            ServerState::Maint
        } else if flags & ADMIN_FDRAIN != 0 {
            ServerState::Drain
        } else {
            ServerState::Ready
        }
    }
}

impl From<HaproxyDown> for ServerState {
    fn from(d: HaproxyDown) -> Self {
        match d {
            HaproxyDown::Maint => ServerState::Maint,
            HaproxyDown::Drain => ServerState::Drain,
        }
    }
}

/// One server as HAProxy holds it (or as probed wants it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    pub state: ServerState,
    /// The user weight (`srv_uweight`), which `set server ... weight` sets.
    pub weight: u32,
}

/// Why an answer to `show servers state` could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    UnknownBackend,
    /// Anything else HAProxy said (an older format, "Permission denied", ...).
    Unexpected(String),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::UnknownBackend => f.write_str("no such backend"),
            StateError::Unexpected(s) => write!(f, "unexpected answer to show servers state: {s:?}"),
        }
    }
}

impl std::error::Error for StateError {}

/// Reads the answer to `show servers state BACKEND`: version line `1`, a `#` header naming
/// the columns, one line per server. Columns are found by name in the header, so versions
/// that add columns read the same.
pub fn parse_servers_state(text: &str, backend: &str) -> Result<BTreeMap<String, Server>, StateError> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    if first.starts_with("Can't find backend") {
        return Err(StateError::UnknownBackend);
    }
    if first != "1" {
        return Err(StateError::Unexpected(first.to_string()));
    }
    let header: Vec<&str> = match lines.next() {
        Some(h) if h.starts_with('#') => h.trim_start_matches('#').split_whitespace().collect(),
        other => return Err(StateError::Unexpected(other.unwrap_or_default().to_string())),
    };
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| StateError::Unexpected(format!("no {name} column in {}", header.join(" "))))
    };
    let (be, srv, admin, weight) = (
        column("be_name")?,
        column("srv_name")?,
        column("srv_admin_state")?,
        column("srv_uweight")?,
    );
    let mut out = BTreeMap::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let field = |i: usize| {
            fields
                .get(i)
                .copied()
                .ok_or_else(|| StateError::Unexpected(line.to_string()))
        };
        if field(be)? != backend {
            continue;
        }
        let number =
            |i: usize| field(i).and_then(|f| f.parse::<u32>().map_err(|_| StateError::Unexpected(line.to_string())));
        out.insert(
            field(srv)?.to_string(),
            Server {
                state: ServerState::from_admin_flags(number(admin)?),
                weight: number(weight)?,
            },
        );
    }
    Ok(out)
}

/// What a sync writes: the commands, in the order they run, and what they are about.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub commands: Vec<String>,
    /// Servers whose state or weight changes.
    pub changed: usize,
    /// Followed servers that will be `ready` once the commands ran.
    pub ready: usize,
    /// (endpoint, server) pairs the backend does not have.
    pub unknown: Vec<(String, String)>,
    /// Endpoints the sink's settings name no server for (a change of the profile that has not
    /// reached this sink's settings yet).
    pub unmapped: Vec<String>,
}

/// The commands that bring `held` to what `model` asks for. Servers leaving traffic go
/// first and servers joining it last, with weights in between, so a returning server never
/// takes traffic at a stale weight.
pub fn plan(cfg: &Config, model: &ProfileModel, held: &BTreeMap<String, Server>) -> Plan {
    let backend = &cfg.backend;
    let mut out = Plan::default();
    let (mut leave, mut weights, mut join) = (Vec::new(), Vec::new(), Vec::new());
    for (name, state) in &model.endpoints {
        let Some(server) = cfg.servers.get(&**name) else {
            out.unmapped.push(name.to_string());
            continue;
        };
        let want = Server {
            state: if state.eligible {
                ServerState::Ready
            } else if state.admin == AdminState::Drain && state.status != EndpointStatus::Degraded {
                // Drained by the operator while it serves: HAProxy keeps its sessions and
                // sends it no new ones.
                ServerState::Drain
            } else {
                cfg.down.into()
            },
            // Its slow start's share, rounded up (HAProxy's weights are whole), at most
            // HAProxy's largest (an agent's percentage can go past the configured weight; HAProxy
            // caps its own agents' weights there too).
            weight: state.weight_now().min(config::HAPROXY_MAX_WEIGHT),
        };
        if want.state == ServerState::Ready {
            out.ready += 1;
        }
        let Some(now) = held.get(server) else {
            out.unknown.push((name.to_string(), server.clone()));
            continue;
        };
        if *now == want {
            continue;
        }
        out.changed += 1;
        if now.weight != want.weight {
            weights.push(format!("set server {backend}/{server} weight {}", want.weight));
        }
        if now.state != want.state {
            let command = format!("set server {backend}/{server} state {}", want.state.name());
            if want.state == ServerState::Ready {
                join.push(command);
            } else {
                leave.push(command);
            }
        }
    }
    out.commands = leave.into_iter().chain(weights).chain(join).collect();
    out
}

/// Joins commands into lines of at most `MAX_LINE` bytes (a single longer command gets a
/// line of its own).
fn lines(commands: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in commands {
        match out.last_mut() {
            Some(line) if line.len() + 1 + c.len() <= MAX_LINE => {
                line.push(';');
                line.push_str(c);
            }
            _ => out.push(c.clone()),
        }
    }
    out
}

/// Splits the answer to a line of commands into one answer per command: each ends with an
/// empty line, so an empty answer is an empty line alone.
fn answers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            out.push(current.join(" "));
            current.clear();
        } else {
            current.push(line.trim());
        }
    }
    if !current.is_empty() {
        out.push(current.join(" "));
    }
    out
}

pub struct HaproxySink {
    cfg: Config,
    /// `IO_TIMEOUT`; shorter in the unit tests.
    timeout: Duration,
}

impl HaproxySink {
    /// Checks that the socket answers and that the backend and every followed server exist.
    pub fn open(cfg: &Config) -> Result<HaproxySink, SinkError> {
        let mut sink = HaproxySink {
            cfg: cfg.clone(),
            timeout: IO_TIMEOUT,
        };
        sink.check()?;
        Ok(sink)
    }

    /// Sends one line of commands; HAProxy's whole answer, within `self.timeout` in all and at
    /// most `MAX_ANSWER` bytes.
    fn ask(&self, line: &str) -> Result<String, SinkError> {
        let path = &self.cfg.socket;
        let deadline = Instant::now() + self.timeout;
        let late = || {
            SinkError::new(
                SinkFault::Write,
                format!(
                    "HAProxy admin socket {}: no whole answer to `{}` within {:?}",
                    path.display(),
                    first_command(line),
                    self.timeout
                ),
            )
        };
        let mut stream = crate::kernel::sys::unix_connect_within(path, self.timeout).map_err(|e| {
            let hint = match e.kind() {
                ErrorKind::NotFound => "it does not exist",
                ErrorKind::ConnectionRefused => "nothing listens on it",
                ErrorKind::WouldBlock | ErrorKind::TimedOut => "its listener accepts no connection",
                _ => "cannot connect",
            };
            SinkError::new(
                SinkFault::Missing,
                format!(
                    "HAProxy admin socket {}: {hint} ({e}); is HAProxy running with `stats socket {} level admin`?",
                    path.display(),
                    path.display()
                ),
            )
        })?;
        let io = |e: std::io::Error| {
            SinkError::new(SinkFault::Write, format!("HAProxy admin socket {}", path.display())).because(e)
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        stream.set_write_timeout(Some(left)).map_err(io)?;
        stream
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| if timed_out(&e) { late() } else { io(e) })?;
        // Non-interactive mode: HAProxy answers the line and closes the connection.
        let answer = match read_answer(&mut stream, deadline, MAX_ANSWER) {
            Ok(answer) => answer,
            Err(e) if timed_out(&e) => return Err(late()),
            Err(e) if e.kind() == ErrorKind::FileTooLarge => {
                return Err(SinkError::new(
                    SinkFault::Data,
                    format!(
                    "HAProxy admin socket {}: the answer to `{}` is longer than {} MiB; that is not HAProxy answering",
                    path.display(),
                    first_command(line),
                    MAX_ANSWER >> 20
                ),
                ))
            }
            Err(e) => return Err(io(e)),
        };
        String::from_utf8(answer).map_err(|_| {
            SinkError::new(
                SinkFault::Data,
                format!(
                    "HAProxy admin socket {}: the answer to `{}` is not UTF-8",
                    path.display(),
                    first_command(line)
                ),
            )
        })
    }

    /// What HAProxy holds for the backend's servers.
    fn read(&self) -> Result<BTreeMap<String, Server>, SinkError> {
        let backend = &self.cfg.backend;
        let answer = self.ask(&format!("show servers state {backend}"))?;
        parse_servers_state(&answer, backend).map_err(|e| match e {
            StateError::UnknownBackend => {
                let known = self
                    .ask("show backend")
                    .map(|a| {
                        a.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty() && !l.starts_with('#'))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                SinkError::new(
                    SinkFault::Missing,
                    format!(
                        "HAProxy at {} has no backend {backend}; its backends: {}",
                        self.cfg.socket.display(),
                        if known.is_empty() { "none" } else { &known }
                    ),
                )
            }
            StateError::Unexpected(_) => {
                SinkError::new(SinkFault::Data, format!("HAProxy at {}", self.cfg.socket.display())).because(e)
            }
        })
    }

    /// Runs `commands`; the first one HAProxy refused, with its answer.
    fn run(&self, commands: &[String]) -> Result<(), SinkError> {
        let mut refused = Vec::new();
        for line in lines(commands) {
            let answer = self.ask(&line)?;
            for (command, said) in line.split(';').zip(answers(&answer)) {
                if !said.is_empty() {
                    refused.push(format!("`{command}`: {said}"));
                }
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        let mut text = format!("HAProxy refused {}", refused.join("; "));
        if text.contains("Permission denied") {
            text += " (the socket needs `level admin`)";
        }
        Err(SinkError::new(SinkFault::Write, text))
    }

    fn unknown_error(&self, plan: &Plan) -> Option<SinkError> {
        let mut problems: Vec<String> = plan
            .unknown
            .iter()
            .map(|(endpoint, server)| {
                format!(
                    "HAProxy backend {} has no server {server} (endpoint {endpoint}): add it to haproxy.cfg, \
                     or set haproxy_server on the endpoint",
                    self.cfg.backend
                )
            })
            .collect();
        problems.extend(
            plan.unmapped
                .iter()
                .map(|e| format!("endpoint {e} has no HAProxy server in this sink's settings")),
        );
        (!problems.is_empty()).then(|| SinkError::new(SinkFault::Missing, problems.join("; ")))
    }
}

impl Sink for HaproxySink {
    fn describe(&self) -> String {
        format!("haproxy backend {} via {}", self.cfg.backend, self.cfg.socket.display())
    }

    fn check(&mut self) -> Result<(), SinkError> {
        let path = &self.cfg.socket;
        match std::fs::metadata(path) {
            Err(e) => {
                let p = path.display();
                return Err(SinkError::new(SinkFault::Missing, format!(
                    "HAProxy admin socket {p}: {e}; start HAProxy with `stats socket {p} level admin` in its global section"
                )));
            }
            Ok(m) if !m.file_type().is_socket() => {
                return Err(SinkError::new(
                    SinkFault::WrongType,
                    format!(
                        "{} is not a socket; socket names HAProxy's `stats socket`",
                        path.display()
                    ),
                ))
            }
            Ok(_) => {}
        }
        let held = self.read()?;
        let missing: Vec<String> = self
            .cfg
            .servers
            .iter()
            .filter(|(_, server)| !held.contains_key(*server))
            .map(|(endpoint, server)| format!("{server} (endpoint {endpoint})"))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SinkError::new(
                SinkFault::Missing,
                format!(
                    "HAProxy backend {} has no server {}; its servers: {}",
                    self.cfg.backend,
                    missing.join(", "),
                    held.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ))
        }
    }

    fn sync(&mut self, model: &ProfileModel) -> Result<SyncReport, SinkError> {
        let held = self.read()?;
        let plan = plan(&self.cfg, model, &held);
        // The servers HAProxy has are set even when some are missing: one typo does not keep
        // the others from following their health.
        self.run(&plan.commands)?;
        if let Some(e) = self.unknown_error(&plan) {
            return Err(e);
        }
        Ok(SyncReport {
            written: plan.changed,
            entries: plan.ready,
            ..SyncReport::default()
        })
    }

    fn verify(&mut self, model: &ProfileModel) -> Result<bool, SinkError> {
        let held = self.read()?;
        let plan = plan(&self.cfg, model, &held);
        if let Some(e) = self.unknown_error(&plan) {
            return Err(e);
        }
        Ok(plan.commands.is_empty())
    }

    /// `on_stop = "clear"`: every followed server leaves traffic (the `down` state).
    fn clear(&mut self) -> Result<(), SinkError> {
        let held = self.read()?;
        let down = ServerState::from(self.cfg.down);
        let commands: Vec<String> = self
            .cfg
            .servers
            .values()
            .filter(|s| held.get(*s).is_some_and(|h| h.state != down))
            .map(|s| format!("set server {}/{s} state {}", self.cfg.backend, down.name()))
            .collect();
        self.run(&commands)
    }
}

/// The first command of a line, for error messages.
fn first_command(line: &str) -> &str {
    line.split(';').next().unwrap_or(line)
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Reads until the peer closes, giving up at `deadline` (`TimedOut`) or past `max` bytes
/// (`FileTooLarge`). A timeout per read would let a peer that sends a byte now and then hold
/// the reader for ever; this one is set to what is left before each read.
fn read_answer(stream: &mut UnixStream, deadline: Instant, max: usize) -> std::io::Result<Vec<u8>> {
    let mut answer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(answer),
            Ok(n) if answer.len() + n > max => return Err(ErrorKind::FileTooLarge.into()),
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
