//! The exec sink: a long-lived program of the operator's, told about its profile's endpoints
//! as JSON lines on its stdin. It is started at the first sync, gets the whole profile once,
//! then one line per endpoint that changed; when it exits it is started again (after a delay
//! that grows while it keeps dying young) and gets the whole profile again.
//!
//! The lines (one JSON object each, UTF-8, `\n`-terminated; `seq` is the change stream's
//! sequence number the line reflects, shared by the lines of one batch):
//!
//! ```text
//! {"type":"full","profile":"web","seq":12,"endpoints":[ENDPOINT, ...]}
//! {"type":"change","profile":"web","seq":13,"endpoint":ENDPOINT}
//! {"type":"removed","profile":"web","seq":14,"name":"b2"}
//! {"type":"clear","profile":"web"}            (on stop, with on_stop = "clear")
//! ENDPOINT = {"name":"b0","address":"198.18.0.2","port":80,"protocol":"tcp","weight":1,
//!             "priority":1,"admin":"enabled","health":"Healthy","status":"Online","eligible":true}
//!            (with "ramp": thousandths of the weight, while the endpoint is in a slow start)
//! ```
//!
//! `full` lists every endpoint of the profile, eligible or not; the eligible set is those with
//! `"eligible": true`. A program that reads nothing for `WRITE_TIMEOUT` is taken as stuck and
//! restarted, so a sync never blocks the sink's thread for longer.
//!
//! The program runs with no capability (`confine`): probed's own (ambient in the systemd unit)
//! would make it root in all but name. It must be a file only root or probed's user can change,
//! checked at open and before every start.
pub mod config;

pub use config::KEYS;
mod confine;

use std::{
    collections::BTreeMap,
    io::{ErrorKind, Write},
    os::{
        fd::{AsFd, AsRawFd},
        unix::{fs::PermissionsExt, process::CommandExt},
    },
    path::Path,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;

use self::config::ExecSink as Config;
use super::{Sink, SinkError, SinkFault, SyncReport};
use crate::{changes::EndpointState, sinks::model::ProfileModel};

/// Longest a sync waits for the program to take its lines.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A program that ran this long before exiting is restarted at once; one that died younger
/// waits `RESTART_FIRST`, doubled on each quick death up to `RESTART_MAX`.
const LIVED_LONG: Duration = Duration::from_secs(10);
const RESTART_FIRST: Duration = Duration::from_millis(200);
const RESTART_MAX: Duration = Duration::from_secs(30);
/// On stop, how long the program has to exit after its stdin closes before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// One line on the program's stdin.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Line<'a> {
    Full {
        profile: &'a str,
        seq: u64,
        endpoints: Vec<Endpoint<'a>>,
    },
    Change {
        profile: &'a str,
        seq: u64,
        endpoint: Endpoint<'a>,
    },
    Removed {
        profile: &'a str,
        seq: u64,
        name: &'a str,
    },
    Clear {
        profile: &'a str,
    },
}

/// An endpoint: its name beside its state's fields.
#[derive(Debug, Serialize)]
pub struct Endpoint<'a> {
    pub name: &'a str,
    #[serde(flatten)]
    pub state: &'a EndpointState,
}

/// The lines that take a program that was told `sent` to `model`: every endpoint that is
/// new or changed, then every one removed, in name order. `None` for `sent` (a program just
/// started) gives the one `full` line.
pub fn lines(model: &ProfileModel, sent: Option<&BTreeMap<Arc<str>, EndpointState>>) -> Vec<String> {
    let profile = &*model.profile;
    let seq = model.seq;
    let Some(sent) = sent else {
        let full = Line::Full {
            profile,
            seq,
            endpoints: model.endpoints.iter().map(endpoint).collect(),
        };
        return vec![to_json(&full)];
    };
    let changed = model
        .endpoints
        .iter()
        .filter(|(name, state)| sent.get(*name) != Some(*state))
        .map(|e| {
            to_json(&Line::Change {
                profile,
                seq,
                endpoint: endpoint(e),
            })
        });
    let removed = sent
        .keys()
        .filter(|name| !model.endpoints.contains_key(*name))
        .map(|name| to_json(&Line::Removed { profile, seq, name }));
    changed.chain(removed).collect()
}

fn endpoint<'a>((name, state): (&'a Arc<str>, &'a EndpointState)) -> Endpoint<'a> {
    Endpoint { name, state }
}

fn to_json(line: &Line<'_>) -> String {
    // Plain data with string keys: serialization cannot fail.
    serde_json::to_string(line).unwrap_or_default()
}

/// The running program.
struct Running {
    child: Child,
    stdin: ChildStdin,
    started: Instant,
}

pub struct ExecSink {
    cfg: Config,
    running: Option<Running>,
    /// What the running program was told, by endpoint name.
    sent: BTreeMap<Arc<str>, EndpointState>,
    profile: Arc<str>,
    /// When the program may be started again, and the delay after the next quick death.
    not_before: Instant,
    delay: Duration,
    /// How the last program ended, for the error a sync shows until the next start.
    last_exit: Option<String>,
}

impl ExecSink {
    /// Checks the program; it is started by the first sync.
    pub fn open(cfg: &Config) -> Result<ExecSink, SinkError> {
        let mut sink = ExecSink {
            cfg: cfg.clone(),
            running: None,
            sent: BTreeMap::new(),
            profile: Arc::from(""),
            not_before: Instant::now(),
            delay: RESTART_FIRST,
            last_exit: None,
        };
        sink.check()?;
        Ok(sink)
    }

    fn program(&self) -> &str {
        self.cfg.command.first().map_or("", String::as_str)
    }

    /// Notices a program that has exited: reaps it and sets when the next may start.
    fn reap(&mut self) {
        let Some(r) = &mut self.running else { return };
        let status = match r.child.try_wait() {
            Ok(None) => return,
            Ok(Some(status)) => describe(status),
            Err(e) => format!("could not be waited for ({e})"),
        };
        let lived = r.started.elapsed();
        self.ended(format!("{status} after {lived:.1?}"), lived);
    }

    /// Forgets the program (already reaped or killed) and schedules the next start.
    fn ended(&mut self, how: String, lived: Duration) {
        self.running = None;
        self.sent.clear();
        if lived >= LIVED_LONG {
            self.delay = RESTART_FIRST;
            self.not_before = Instant::now();
        } else {
            self.not_before = Instant::now() + self.delay;
            self.delay = (self.delay * 2).min(RESTART_MAX);
        }
        log::warn!("exec sink {}: the program {how}", self.program());
        self.last_exit = Some(how);
    }

    /// Kills a program that cannot be written to, and forgets it.
    fn kill(&mut self, why: &str) {
        if let Some(mut r) = self.running.take() {
            let _ = r.child.kill();
            let _ = r.child.wait();
            self.ended(format!("was stopped: {why}"), r.started.elapsed());
        }
    }

    fn start(&mut self) -> Result<(), SinkError> {
        let now = Instant::now();
        if now < self.not_before {
            return Err(SinkError::new(
                SinkFault::Write,
                format!(
                    "{} {}; starting it again in {:.1?}",
                    self.program(),
                    self.last_exit.as_deref().unwrap_or("exited"),
                    self.not_before - now
                ),
            ));
        }
        // Again at every start: a file made writable since the last one is not run.
        self.check()?;
        // The program's stdout goes to probed's stderr: probed's stdout may carry its events.
        let stdout = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| SinkError::new(SinkFault::Setup, "exec sink: duplicate stderr").because(e))?;
        let mut command = Command::new(self.program());
        command
            .args(&self.cfg.command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::from(stdout));
        // SAFETY: drop_capabilities makes system calls only (no allocation, no lock), which is
        // what may run in the child of a multi-threaded process between fork and exec.
        unsafe { command.pre_exec(crate::kernel::caps::drop_capabilities) };
        let mut child = command.spawn().map_err(|e| {
            self.not_before = Instant::now() + self.delay;
            self.delay = (self.delay * 2).min(RESTART_MAX);
            SinkError::new(SinkFault::Setup, format!("exec sink: cannot start {}", self.program())).because(e)
        })?;
        let Some(stdin) = child.stdin.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SinkError::new(
                SinkFault::Setup,
                "exec sink: the program has no stdin pipe",
            ));
        };
        crate::kernel::sys::set_nonblocking(&stdin)
            .map_err(|e| SinkError::new(SinkFault::Setup, "exec sink: stdin pipe").because(e))?;
        log::info!("exec sink: started {} (pid {})", self.program(), child.id());
        self.running = Some(Running {
            child,
            stdin,
            started: Instant::now(),
        });
        self.sent.clear();
        Ok(())
    }

    /// Writes `lines` to the program, waiting at most `WRITE_TIMEOUT` for it to take them.
    fn send(&mut self, lines: &[String]) -> Result<(), SinkError> {
        let Some(r) = &mut self.running else {
            return Err(SinkError::new(SinkFault::Write, "exec sink: no program running"));
        };
        let mut text = lines.join("\n");
        text.push('\n');
        if let Err(e) = write_within(&mut r.stdin, text.as_bytes(), WRITE_TIMEOUT) {
            let why = if e.kind() == ErrorKind::TimedOut {
                format!("it read nothing for {WRITE_TIMEOUT:?}")
            } else {
                format!("writing to its stdin failed ({e})")
            };
            // A closed pipe usually means the program has exited: say how, if it has.
            self.reap();
            self.kill(&why);
            return Err(SinkError::new(
                SinkFault::Write,
                format!(
                    "exec sink {}: {}",
                    self.program(),
                    self.last_exit.as_deref().unwrap_or(&why)
                ),
            ));
        }
        Ok(())
    }
}

impl Sink for ExecSink {
    fn describe(&self) -> String {
        format!("exec {}", self.cfg.command.join(" "))
    }

    fn check(&mut self) -> Result<(), SinkError> {
        let program = Path::new(self.program());
        let meta = std::fs::metadata(program).map_err(|e| {
            SinkError::new(SinkFault::Missing, format!("exec sink: program {}", program.display())).because(e)
        })?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(SinkError::new(
                SinkFault::WrongType,
                format!("exec sink: {} is not an executable file", program.display()),
            ));
        }
        let me = crate::kernel::process::euid();
        confine::check_program(program, me).map_err(|e| {
            SinkError::new(
                SinkFault::Setup,
                format!("exec sink: refusing to run {}", program.display()),
            )
            .because(e)
        })
    }

    fn sync(&mut self, model: &ProfileModel) -> Result<SyncReport, SinkError> {
        self.profile = model.profile.clone();
        self.reap();
        let fresh = self.running.is_none();
        if fresh {
            self.start()?;
        }
        let lines = lines(model, (!fresh).then_some(&self.sent));
        if !lines.is_empty() {
            self.send(&lines)?;
        }
        self.sent.clone_from(&model.endpoints);
        self.last_exit = None;
        Ok(SyncReport {
            written: lines.len(),
            entries: model.eligible().count(),
            ..SyncReport::default()
        })
    }

    /// The program is alive and was told `model`; a dead one makes the next sync restart it.
    fn verify(&mut self, model: &ProfileModel) -> Result<bool, SinkError> {
        self.reap();
        Ok(self.running.is_some() && self.sent == model.endpoints)
    }

    fn clear(&mut self) -> Result<(), SinkError> {
        if self.running.is_none() {
            return Ok(());
        }
        let line = to_json(&Line::Clear { profile: &self.profile });
        self.send(&[line])?;
        self.sent.clear();
        Ok(())
    }
}

impl Drop for ExecSink {
    /// Closes the program's stdin (its cue to exit), gives it `STOP_GRACE`, then kills it.
    fn drop(&mut self) {
        let Some(Running { mut child, stdin, .. }) = self.running.take() else {
            return;
        };
        drop(stdin);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => format!("ended ({status})"),
    }
}

/// Writes all of `bytes` to a non-blocking pipe, waiting for room at most `limit` in all.
fn write_within(stdin: &mut ChildStdin, mut bytes: &[u8], limit: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + limit;
    while !bytes.is_empty() {
        match stdin.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ErrorKind::TimedOut.into());
                }
                match crate::kernel::event::wait_writable(stdin.as_raw_fd(), left) {
                    Err(e) if e.kind() != ErrorKind::Interrupted => return Err(e),
                    _ => {}
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
