//! The runner without root: the L4 engine is `FakeL4` (probes are answered here), time is a
//! `FakeClock`, and the change stream is read through a subscription. Each test drives the
//! runner's own functions (fire, on_l4, requests) the way its loop would.
use crate::changes::{Change, ChangeKind, EndpointChange, ProfileChange, Subscription};
use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use super::Runner;
use crate::{
    config::Config,
    daemon::ports::{
        fake::{starter, FakeClock, FakeL4},
        Ports,
    },
    engine::{L4Outcome, L4Proto, L4Result},
    status::{AdminState, EndpointStatus as S, Health, ProfileStatus},
};

/// A runner on a virtual clock with its files in a private directory.
struct Harness {
    runner: Runner,
    l4: Arc<FakeL4>,
    clock: FakeClock,
    dir: PathBuf,
    changes: Subscription,
}

/// lb, TCP, interval 1 s, timeout 500 ms, 2 results either way; one endpoint per name, at
/// 198.18.1.<n>:<port>.
fn config_text(dir: &std::path::Path, endpoints: &[(&str, u16)]) -> String {
    let mut text = format!(
        "[daemon]\nevents = \"{}\"\nstate_file = \"{}\"\npin_dir = \"{}\"\n\n\
         [[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
         protocol = \"tcp\"\ninterval = \"1s\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n",
        dir.join("events.jsonl").display(),
        dir.join("state.json").display(),
        dir.join("pins").display()
    );
    for (i, (name, port)) in endpoints.iter().enumerate() {
        text.push_str(&format!(
            "\n[[profile.endpoint]]\nname = \"{name}\"\naddress = \"198.18.1.{}\"\nport = {port}\npriority = {}\n",
            i + 1,
            i + 1
        ));
    }
    text
}

fn parse(text: &str) -> Config {
    Config::parse(text, "unit.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

impl Harness {
    fn new(name: &str, endpoints: &[(&str, u16)]) -> Harness {
        let dir = std::env::temp_dir().join(format!("probed-runner-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self::start(dir, endpoints)
    }

    /// A runner over `dir` (a restart when a runner used it before).
    fn start(dir: PathBuf, endpoints: &[(&str, u16)]) -> Harness {
        let config = parse(&config_text(&dir, endpoints));
        Self::start_with(dir, config)
    }

    /// A runner over `dir` with `config`.
    fn start_with(dir: PathBuf, config: Config) -> Harness {
        let l4 = Arc::new(FakeL4::default());
        let clock = FakeClock::default();
        clock.set_ns(1_000_000_000);
        let ports = Ports {
            clock: Box::new(clock.clone()),
            start_l4: starter(l4.clone()),
        };
        let mut runner = Runner::new(config, ports).expect("runner starts");
        let (_, changes) = runner.subscribe("test", 1024);
        Harness {
            runner,
            l4,
            clock,
            dir,
            changes,
        }
    }

    /// Runs the loop's work until `ms` from now: fires what is due and answers every probe
    /// 1 ms later with `answer(target)`.
    fn run_for(&mut self, ms: u64, answer: impl Fn(SocketAddr) -> L4Outcome) {
        let until = self.clock.now() + ms * 1_000_000;
        loop {
            // A slow start's step before the next probe is taken first, as the loop would.
            let probe = self.runner.probe.sched.next_due().filter(|d| *d <= until);
            let ramp = self.runner.table.ramps().next_due().filter(|d| *d <= until);
            let due = match (probe, ramp) {
                (_, Some(r)) if probe.is_none_or(|p| r <= p) => {
                    self.clock.set_ns(r.max(self.clock.now()));
                    self.runner.step_ramps(self.clock.now());
                    continue;
                }
                (Some(p), _) => p,
                (None, _) => break,
            };
            self.clock.set_ns(due.max(self.clock.now()));
            self.runner.fire(self.clock.now());
            self.clock.advance_ms(1);
            for req in self.l4.take() {
                let outcome = answer(req.target);
                self.runner.on_l4(L4Result {
                    token: req.token,
                    target: req.target,
                    outcome,
                    elapsed: Duration::from_millis(1),
                    queued: Duration::ZERO,
                });
            }
        }
        self.clock.set_ns(until.max(self.clock.now()));
    }

    fn status(&self, endpoint: &str) -> (S, bool) {
        let id = self.runner.table.find("web", endpoint).expect("endpoint exists");
        let t = &self.runner.table.targets()[&id];
        (t.status(), t.eligible())
    }

    fn profile(&self) -> (ProfileStatus, bool) {
        let p = &self.runner.table.profiles()[0];
        (p.status, p.fail_open)
    }

    /// Every change published since the last call, oldest first.
    fn changes(&self) -> Vec<Change> {
        self.changes
            .recv_blocking(Duration::ZERO)
            .map(|b| b.changes.into_iter().map(Arc::unwrap_or_clone).collect())
            .unwrap_or_default()
    }

    fn reload(
        &mut self,
        endpoints: &[(&str, u16)],
    ) -> Result<crate::daemon::ReloadReport, crate::daemon::RequestError> {
        let config = parse(&config_text(&self.dir, endpoints));
        self.runner.reload_only(config)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // The saver's thread may still be writing a snapshot: let it end first, or it puts a
        // state file back into the directory being removed.
        self.runner.persist.saver.finish();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An endpoint change as (endpoint, kind, from, to, eligible after).
type Summary<'a> = (&'a str, ChangeKind, Option<S>, Option<S>, bool);

fn endpoint_changes(changes: &[Change]) -> Vec<Summary<'_>> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Endpoint(e) => Some(summary(e)),
            Change::Profile(_) | Change::Notice(_) => None,
        })
        .collect()
}

fn summary(e: &EndpointChange) -> Summary<'_> {
    let to = (!e.removed).then_some(e.state.status);
    (&e.endpoint, e.kind, e.from, to, !e.removed && e.state.eligible)
}

fn profile_changes(changes: &[Change]) -> Vec<&ProfileChange> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Profile(p) => Some(p),
            Change::Endpoint(_) | Change::Notice(_) => None,
        })
        .collect()
}

const OPEN: fn(SocketAddr) -> L4Outcome = |_| L4Outcome::Open;
/// Probes of port 80 time out, the others find it open.
const ONLY_PORT_80_FAILS: fn(SocketAddr) -> L4Outcome = |t| {
    if t.port() == 80 {
        L4Outcome::Timeout
    } else {
        L4Outcome::Open
    }
};

/// Each profile's count of endpoints behind schedule, as the runner keeps it, after checking
/// it against a count of the probed endpoints' lateness.
fn behind_counts(runner: &Runner) -> Vec<u64> {
    let kept: Vec<u64> = runner.table.profiles().iter().map(|p| p.behind).collect();
    let mut counted = vec![0u64; kept.len()];
    for t in runner.table.targets().values() {
        if t.should_probe() && t.behind() {
            counted[t.profile_ix() as usize] += 1;
        }
    }
    assert_eq!(kept, counted, "counts kept as results come vs counted");
    kept
}

mod admin;
mod fleet;
mod probing;
mod reload;
mod slow_start;
mod state;
