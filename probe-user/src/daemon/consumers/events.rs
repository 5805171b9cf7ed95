//! The events file, the change stream's first subscriber: one JSON object per endpoint change,
//! to standard output or appended to a file, written by a thread of its own so that a slow
//! disk or a blocked pipe never holds up probing. Lines are written a batch at a time and
//! flushed after each batch, so a `tail -f` (or a test) sees a change within milliseconds.
use crate::changes::{Change, ChangeKind, EndpointChange, EndpointState, Notice, RunResult, Subscription};
use std::{
    fs::OpenOptions,
    io::{BufWriter, Write},
    sync::mpsc,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::daemon::DaemonError;
use crate::{config::EventsOutput, status::EndpointStatus};

/// How many endpoints' changes may wait for the writer before changes are lost. Changes of
/// one endpoint fold into one, so this is only reached when that many endpoints change
/// while the writer is stuck.
pub const QUEUE_CAPACITY: usize = 1 << 20;

/// One line of the events file: a change of one endpoint's monitor status or eligibility.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at_unix_ms: u64,
    /// CLOCK_MONOTONIC of the change (for a health change, the end of the run's last result).
    pub at_ns: u64,
    pub kind: ChangeKind,
    /// `address:port/protocol`, or `profile:CHILD` for a nested endpoint.
    pub target: String,
    pub profile: String,
    pub endpoint: String,
    /// Endpoint monitor status before and after; None for an endpoint that a reload added
    /// (`from`) or removed (`to`).
    pub from: Option<EndpointStatus>,
    pub to: Option<EndpointStatus>,
    /// May receive new traffic after the change, fail-open included.
    pub eligible: bool,
    /// The consecutive results that decided a health change; empty for other kinds.
    pub results: Vec<RunResult>,
    /// Start of the first result of the run to the change (health changes only).
    pub measured_window_ms: f64,
    /// What the SPEC section 3 formula gives for the same settings (health changes only).
    pub formula_window_ms: f64,
    /// `cert-expiring` notices: when the server's TLS certificate expires (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_not_after_unix: Option<i64>,
}

/// An events line as it is written: `Event`'s fields borrowed from the change. Building an
/// owned `Event` per line cost three strings and a copy of the results, on a niced thread that
/// a busy core leaves little time: at 65k TCP checks on one core the first round's lines took
/// the writer ~8 s, while their changes waited in memory.
#[derive(Serialize)]
pub struct EventLine<'a> {
    at_unix_ms: u64,
    at_ns: u64,
    kind: ChangeKind,
    target: Target<'a>,
    profile: &'a str,
    endpoint: &'a str,
    from: Option<EndpointStatus>,
    to: Option<EndpointStatus>,
    eligible: bool,
    results: &'a [RunResult],
    measured_window_ms: f64,
    formula_window_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cert_not_after_unix: Option<i64>,
}

impl<'a> EventLine<'a> {
    /// A notice's line: the endpoint's status as it is (`from` and `to` alike) and what the
    /// notice is about.
    pub fn notice(n: &'a Notice) -> Self {
        EventLine {
            at_unix_ms: n.at_unix_ms,
            at_ns: n.at_ns,
            kind: n.kind,
            target: Target(&n.state),
            profile: &n.profile,
            endpoint: &n.endpoint,
            from: Some(n.state.status),
            to: Some(n.state.status),
            eligible: n.state.eligible,
            results: &[],
            measured_window_ms: 0.0,
            formula_window_ms: 0.0,
            cert_not_after_unix: n.cert_not_after,
        }
    }

    pub fn of(c: &'a EndpointChange) -> Self {
        let (results, measured, formula) = match &c.transition {
            Some(t) => (&t.results[..], t.measured_window_ms, t.formula_window_ms),
            None => (&[][..], 0.0, 0.0),
        };
        EventLine {
            at_unix_ms: c.at_unix_ms,
            at_ns: c.at_ns,
            kind: c.kind,
            target: Target(&c.state),
            profile: &c.profile,
            endpoint: &c.endpoint,
            from: c.from,
            to: (!c.removed).then_some(c.state.status),
            eligible: !c.removed && c.state.eligible,
            results,
            measured_window_ms: measured,
            formula_window_ms: formula,
            cert_not_after_unix: None,
        }
    }
}

/// `address:port/protocol`, or `profile:CHILD` for a nested endpoint, written as a string.
struct Target<'a>(&'a EndpointState);

impl std::fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        match &s.nested {
            Some(child) => write!(f, "profile:{child}"),
            None => write!(
                f,
                "{}/{}",
                std::net::SocketAddr::new(s.address, s.port),
                s.protocol.as_str()
            ),
        }
    }
}

impl Serialize for Target<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An open events destination.
pub struct EventSink {
    out: Box<dyn Write + Send>,
    target: EventsOutput,
}

impl EventSink {
    pub fn open(target: &EventsOutput) -> Result<Self, DaemonError> {
        let out: Box<dyn Write + Send> = match target {
            EventsOutput::Stdout => Box::new(BufWriter::new(std::io::stdout())),
            EventsOutput::File(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| DaemonError::Io {
                        op: "create the events directory",
                        path: Some(dir.to_path_buf()),
                        source,
                    })?;
                }
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| DaemonError::Io {
                        op: "open the events file",
                        path: Some(path.clone()),
                        source,
                    })?;
                Box::new(BufWriter::new(file))
            }
        };
        Ok(Self {
            out,
            target: target.clone(),
        })
    }

    /// Writes one line. A full disk must not stop health checking, so failures are logged only.
    fn emit(&mut self, event: &EventLine<'_>) {
        let written = serde_json::to_writer(&mut self.out, event)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(e) = written {
            log::warn!("cannot write an event: {e}");
        }
    }

    fn flush(&mut self) {
        if let Err(e) = self.out.flush() {
            log::warn!("cannot write events: {e}");
        }
    }
}

/// A new destination, and the subscription whose changes go there: the writer's new start
/// on the stream, where the one it had ends.
struct Swap {
    sink: EventSink,
    changes: Subscription,
}

/// The writer thread and the way to point it at another destination (a reload, SIGUSR1).
pub struct EventWriter {
    target: EventsOutput,
    swap: Option<mpsc::Sender<Swap>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EventWriter {
    /// Starts writing what `changes` delivers to `sink`.
    pub fn start(sink: EventSink, changes: Subscription) -> Result<Self, DaemonError> {
        let target = sink.target.clone();
        let (swap, swaps) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("probed-events".into())
            .spawn(move || {
                crate::daemon::lower_this_thread();
                write_loop(sink, changes, &swaps);
            })
            .map_err(|source| DaemonError::Io {
                op: "spawn the events thread",
                path: None,
                source,
            })?;
        Ok(Self {
            target,
            swap: Some(swap),
            thread: Some(thread),
        })
    }

    pub fn target(&self) -> &EventsOutput {
        &self.target
    }

    /// Sends what `changes` delivers to `sink` (opened beforehand, so that a reload fails
    /// before it applies). `changes` replaced the writer's subscription: what that one still
    /// holds goes to the current destination first.
    pub fn switch(&mut self, sink: EventSink, changes: Subscription) {
        self.target = sink.target.clone();
        if let Some(tx) = &self.swap {
            let _ = tx.send(Swap { sink, changes });
        }
    }

    /// Waits for the thread to write what is queued; it ends once the runner has stopped.
    pub fn finish(&mut self) {
        drop(self.swap.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        self.finish();
    }
}

fn write_loop(mut sink: EventSink, mut changes: Subscription, swaps: &mpsc::Receiver<Swap>) {
    loop {
        let Some(batch) = changes.recv_blocking(Duration::from_millis(200)) else {
            // A subscription replaced ends where its successor starts: every change before
            // went to this destination, every later one goes to the next. Any other end is
            // the runner's.
            if !changes.replaced() {
                break;
            }
            let Ok(next) = swaps.recv() else {
                break;
            };
            sink.flush();
            (sink, changes) = (next.sink, next.changes);
            continue;
        };
        if batch.lost > 0 {
            log::warn!(
                "the events file misses {} changes: its writer fell {QUEUE_CAPACITY} endpoints behind",
                batch.lost
            );
        }
        let wrote = !batch.changes.is_empty();
        // Each change is let go once written: at the start a batch is a fleet's first round,
        // and the writer may take seconds over it.
        for change in batch.changes {
            match &*change {
                // A slow start's steps move a share, not a status or eligibility: they are for
                // the sinks, and would be twenty lines per endpoint back in rotation.
                Change::Endpoint(c) if c.kind == ChangeKind::SlowStart => {}
                Change::Endpoint(c) => sink.emit(&EventLine::of(c)),
                Change::Notice(n) => sink.emit(&EventLine::notice(n)),
                Change::Profile(_) => {}
            }
        }
        if wrote {
            sink.flush();
        }
    }
    sink.flush();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        changes::{EndpointState, TransitionDetail},
        outcome::Outcome,
    };

    fn change(nested: Option<&str>, removed: bool, transition: bool) -> EndpointChange {
        let mut state = EndpointState::tcp("198.18.1.7".parse().unwrap(), 8080, true);
        state.nested = nested.map(String::from);
        let result = |ok, rtt_us| RunResult {
            ok,
            outcome: Outcome::Open,
            reason: "open".into(),
            rtt_us,
            started_ns: 1,
            finished_ns: 2,
        };
        EndpointChange {
            seq: 9,
            at_unix_ms: 1_800_000_000_123,
            at_ns: 77,
            kind: ChangeKind::Health,
            profile: "web".into(),
            endpoint: "a".into(),
            from: Some(EndpointStatus::CheckingEndpoint),
            state,
            removed,
            transition: transition.then(|| {
                Arc::new(TransitionDetail {
                    results: vec![result(true, 250), result(true, 1500)],
                    measured_window_ms: 2001.5,
                    formula_window_ms: 2000.25,
                })
            }),
        }
    }

    #[test]
    fn a_written_line_reads_back_as_the_event_it_describes() {
        let read = |c: &EndpointChange| -> Event {
            serde_json::from_slice(&serde_json::to_vec(&EventLine::of(c)).unwrap()).expect("an Event")
        };
        let c = change(None, false, true);
        let e = read(&c);
        assert_eq!(
            e,
            Event {
                at_unix_ms: 1_800_000_000_123,
                at_ns: 77,
                kind: ChangeKind::Health,
                target: "198.18.1.7:8080/tcp".into(),
                profile: "web".into(),
                endpoint: "a".into(),
                from: Some(EndpointStatus::CheckingEndpoint),
                to: Some(EndpointStatus::Online),
                eligible: true,
                results: c.transition.as_ref().unwrap().results.clone(),
                measured_window_ms: 2001.5,
                formula_window_ms: 2000.25,
                cert_not_after_unix: None,
            }
        );
        assert_eq!(e.results[1].rtt_ms(), 1.5);
        let gone = read(&change(Some("edge"), true, false));
        assert_eq!(gone.target, "profile:edge");
        assert_eq!((gone.to, gone.eligible), (None, false), "a removed endpoint");
        assert!(gone.results.is_empty());
        assert_eq!((gone.measured_window_ms, gone.formula_window_ms), (0.0, 0.0));
    }
}
