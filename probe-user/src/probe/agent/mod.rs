//! The agent check, HAProxy's agent-check protocol: beside an endpoint's health check, probed
//! connects to the endpoint's agent (`agent_port` at its address), writes `agent_send` if
//! set, and reads one line in which the backend says how it is (`reply.rs`): up or down,
//! ready, drain or maint, a weight in percent. What the line sets holds until the agent says
//! otherwise and combines with the endpoint's own health, admin state and weight
//! (`state.rs`). An agent that cannot be reached, is too slow or answers no line changes
//! nothing: whether the backend can be reached is its health check's question.
//!
//! The runner asks each endpoint's agent every `agent_interval` (`daemon/runner/agents.rs`);
//! `probed check agent://HOST:PORT` asks one now.
use std::{
    fmt,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod config;
mod reply;
mod state;

pub(crate) use config::read;
pub use config::{AgentSettings, KEYS, MAX_SEND};
pub use reply::{AgentAdmin, AgentHealth, AgentReply, DownWord, MAX_LINE, MAX_PERCENT};
pub use state::{AgentState, MAX_WEIGHT};

/// How one endpoint's agent is asked: prepared once per profile.
#[derive(Debug)]
pub struct AgentProbe {
    pub port: u16,
    pub send: Arc<[u8]>,
    pub timeout: Duration,
    pub interval: Duration,
}

impl AgentProbe {
    pub fn of(settings: &AgentSettings) -> AgentProbe {
        AgentProbe {
            port: settings.port,
            send: Arc::from(settings.send.as_bytes()),
            timeout: settings.timeout,
            interval: settings.interval,
        }
    }

    /// Asks the agent at `target`, within the timeout.
    pub async fn ask(&self, target: SocketAddr) -> Asked {
        let started = Instant::now();
        let answer = match tokio::time::timeout(self.timeout, exchange(target, &self.send)).await {
            Ok(answer) => answer,
            Err(_) => AgentAnswer::Missed(Missed::Timeout),
        };
        Asked {
            answer,
            elapsed: started.elapsed(),
        }
    }
}

/// One ask's answer and how long it took.
#[derive(Debug, Clone)]
pub struct Asked {
    pub answer: AgentAnswer,
    pub elapsed: Duration,
}

/// What one ask of an agent got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentAnswer {
    Reply(AgentReply),
    /// No line: nothing changes.
    Missed(Missed),
}

/// Why an ask got no line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missed {
    /// The connection failed (refused, unreachable, ...).
    Connect(String),
    /// Writing `agent_send` or reading failed.
    Io(String),
    /// The timeout passed first.
    Timeout,
    /// The agent closed the connection, or sent `MAX_LINE` bytes, before a line ended.
    NoLine,
}

async fn exchange(target: SocketAddr, send: &[u8]) -> AgentAnswer {
    let mut stream = match tokio::net::TcpStream::connect(target).await {
        Ok(s) => s,
        Err(e) => return AgentAnswer::Missed(Missed::Connect(e.to_string())),
    };
    if !send.is_empty() {
        if let Err(e) = stream.write_all(send).await {
            return AgentAnswer::Missed(Missed::Io(e.to_string()));
        }
    }
    let mut buf = vec![0u8; MAX_LINE];
    let mut filled = 0;
    while filled < MAX_LINE {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) => break,
            Ok(n) => {
                let was = filled;
                filled += n;
                if buf[was..filled].iter().any(|b| *b == b'\n' || *b == b'\r') {
                    break;
                }
            }
            Err(e) => return AgentAnswer::Missed(Missed::Io(e.to_string())),
        }
    }
    match AgentReply::parse(&buf[..filled]) {
        Some(reply) => AgentAnswer::Reply(reply),
        None => AgentAnswer::Missed(Missed::NoLine),
    }
}

impl fmt::Display for Missed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missed::Connect(e) => write!(f, "agent not reached: {e}"),
            Missed::Io(e) => write!(f, "agent connection failed: {e}"),
            Missed::Timeout => write!(f, "agent did not answer within the timeout"),
            Missed::NoLine => write!(f, "agent answered no complete line"),
        }
    }
}

impl fmt::Display for AgentAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentAnswer::Reply(r) => write!(f, "{r}"),
            AgentAnswer::Missed(m) => write!(f, "{m}"),
        }
    }
}
