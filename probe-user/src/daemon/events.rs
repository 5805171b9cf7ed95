//! Transition events: one JSON object per line, to standard output or appended to a file, each
//! flushed at once so a `tail -f` (or a test) sees it when it happens.
use std::{
    fs::OpenOptions,
    io::{BufWriter, Write},
};

use serde::{Deserialize, Serialize};

use super::DaemonError;
use crate::config::EventsOutput;

/// One probe result of the run that caused a transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventResult {
    pub ok: bool,
    pub reason: String,
    pub rtt_ms: f64,
    /// CLOCK_MONOTONIC, nanoseconds: comparable with the kernel's and the runner's clock.
    pub started_ns: u64,
    pub finished_ns: u64,
}

/// One state transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at_unix_ms: u64,
    /// CLOCK_MONOTONIC of the transition (the end of the last result of the run).
    pub at_ns: u64,
    /// `address:port/protocol`.
    pub target: String,
    pub profile: String,
    pub endpoint: String,
    pub from: String,
    pub to: String,
    pub results: Vec<EventResult>,
    /// Start of the first result of the run to the transition.
    pub measured_window_ms: f64,
    /// What the SPEC section 3 formula gives for the same settings.
    pub formula_window_ms: f64,
}

/// Where events go.
pub struct EventSink {
    out: Box<dyn Write + Send>,
    pub(crate) target: EventsOutput,
}

impl EventSink {
    pub fn open(target: &EventsOutput) -> Result<Self, DaemonError> {
        let out: Box<dyn Write + Send> = match target {
            EventsOutput::Stdout => Box::new(BufWriter::new(std::io::stdout())),
            EventsOutput::File(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| DaemonError::Io {
                        op: "create the events directory",
                        path: dir.display().to_string(),
                        source,
                    })?;
                }
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| DaemonError::Io {
                        op: "open the events file",
                        path: path.display().to_string(),
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
    pub fn emit(&mut self, event: &Event) {
        let line = match serde_json::to_string(event) {
            Ok(l) => l,
            Err(e) => {
                log::warn!("cannot encode an event: {e}");
                return;
            }
        };
        if let Err(e) = writeln!(self.out, "{line}") {
            log::warn!("cannot write an event: {e}");
        }
    }

    /// Writes out the buffered lines. The runner calls it once per loop turn, so a burst of
    /// transitions (a rack going down, every endpoint's first round) costs one write, not
    /// one per event, and no line waits longer than a turn.
    pub fn flush(&mut self) {
        if let Err(e) = self.out.flush() {
            log::warn!("cannot write events: {e}");
        }
    }
}
