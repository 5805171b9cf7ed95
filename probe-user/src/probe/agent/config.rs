//! The agent check's settings, in its own words: its keys in `[profile.health]` (their
//! entries in the reference) and how they are read. An agent runs beside the profile's health
//! check, whatever its protocol, and is not part of the check's identity: changing any of its
//! keys moves no endpoint's health (each endpoint keeps what its agent last set).
use std::time::Duration;

use serde::Serialize;

use crate::{
    rules::limits::{MAX_PACING_MS, TIMEOUT_MS},
    schema::{
        keys::{
            Allowed::{Bytes, Int, Millis},
            Key,
            Reload::Applies,
            Type,
            Unset::{Text, Value},
        },
        read::{parse_duration, Reader, Table},
    },
};

/// The longest `agent_send` (as long as a UDP check's request: `probed check --send` takes
/// both).
pub const MAX_SEND: usize = crate::rules::limits::MAX_UDP_PAYLOAD;

/// A profile's agent check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentSettings {
    /// The port the endpoints' agents listen on (at each endpoint's address).
    pub port: u16,
    /// From the end of one ask to the start of the next.
    pub interval: Duration,
    /// How long an ask may take, connection included.
    pub timeout: Duration,
    /// What is written to the agent once connected (nothing when empty).
    pub send: String,
}

/// Its keys in `[profile.health]`.
pub const KEYS: &[Key] = &[
    Key::new(
        "agent_port",
        Type::Integer,
        Text("none: no agent check"),
        Int(1, 65_535),
        Applies,
        "An agent check beside the health check, as HAProxy's agent-check: each endpoint's agent on \
         this port (at the endpoint's address) answers one line of words: up, down (or fail, stopped), \
         ready, drain, maint, a weight in percent of the configured one (75%). down holds the endpoint \
         down whatever its check says; drain and maint hold until ready; the weight holds until the \
         next. An agent that cannot be reached or answers no line changes nothing.",
    ),
    Key::new(
        "agent_interval",
        Type::Duration,
        Text("the health check's interval"),
        Millis(TIMEOUT_MS.0, MAX_PACING_MS),
        Applies,
        "The time from the end of one ask of an endpoint's agent to the start of the next.",
    )
    .only("agent_port"),
    Key::new(
        "agent_timeout",
        Type::Duration,
        Text("the health check's timeout"),
        Millis(TIMEOUT_MS.0, TIMEOUT_MS.1),
        Applies,
        "How long an ask may take: connecting, sending and reading the line. One that takes longer \
         changes nothing.",
    )
    .only("agent_port"),
    Key::new(
        "agent_send",
        Type::String,
        Value("\"\""),
        Bytes(0, MAX_SEND),
        Applies,
        "A string written to the agent once connected, before its answer is read (HAProxy's \
         agent-send); nothing when empty.",
    )
    .only("agent_port"),
];

/// Reads its keys from the health table `t`, whose check runs every `interval` and times out
/// after `timeout`: None without `agent_port`; Err after a problem (reported).
pub(crate) fn read(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    interval: Duration,
    timeout: Duration,
) -> Result<Option<AgentSettings>, ()> {
    let errors_before = r.errors.len();
    let port = r.int(t, "agent_port");
    let mut duration = |key: &str, (lo, hi): (u64, u64)| -> Option<Duration> {
        let item = r.string(t, key)?;
        match parse_duration(&item.v) {
            Some(d) if (lo..=hi).contains(&(d.as_millis() as u64)) => Some(d),
            _ => {
                r.bad(
                    &item,
                    format!("{key} allows a duration from \"{lo}ms\" to \"{}s\"", hi / 1000),
                );
                None
            }
        }
    };
    let agent_interval = duration("agent_interval", (TIMEOUT_MS.0, MAX_PACING_MS));
    let agent_timeout = duration("agent_timeout", TIMEOUT_MS);
    let send = r.string(t, "agent_send");
    if let Some(item) = &send {
        if item.v.len() > MAX_SEND {
            r.bad(item, format!("agent_send allows at most {MAX_SEND} bytes"));
        }
    }
    let Some(port) = port else {
        for key in ["agent_interval", "agent_timeout", "agent_send"] {
            if Reader::get(t, key).is_some() {
                r.missing(
                    t,
                    key,
                    format!("{key} needs agent_port: without it there is no agent check"),
                );
            }
        }
        return if r.errors.len() == errors_before {
            Ok(None)
        } else {
            Err(())
        };
    };
    let Some(port) = u16::try_from(port.v).ok().filter(|p| *p > 0) else {
        r.bad(&port, "agent_port allows 1 to 65535");
        return Err(());
    };
    if r.errors.len() != errors_before {
        return Err(());
    }
    Ok(Some(AgentSettings {
        port,
        interval: agent_interval.unwrap_or(interval),
        timeout: agent_timeout.unwrap_or(timeout),
        send: send.map(|s| s.v).unwrap_or_default(),
    }))
}
