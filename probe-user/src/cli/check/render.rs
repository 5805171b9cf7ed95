//! The one output line of `probed check`, shared by every probe kind: text for people, or a
//! JSON object per line for scripts, with the same fields in both.
use std::{net::SocketAddr, time::Duration};

use probed::{
    engine::L4Result,
    probe::{http::HttpReport, udp::UdpOutcome},
};

/// One probe's result, as printed.
pub(super) struct Line<'a> {
    pub url: &'a str,
    pub addr: SocketAddr,
    pub healthy: bool,
    pub outcome: String,
    pub elapsed: Duration,
    /// HTTP(S) only: the response status, `null` in JSON when no response came. L4 lines
    /// leave the field out, since they have no such thing.
    pub http_status: Option<Option<u16>>,
}

impl<'a> Line<'a> {
    pub fn http(url: &'a str, addr: SocketAddr, report: &HttpReport) -> Self {
        Self {
            url,
            addr,
            healthy: report.healthy(),
            outcome: report.outcome.to_string(),
            elapsed: report.elapsed,
            http_status: Some(report.status),
        }
    }

    pub fn l4(url: &'a str, r: &L4Result) -> Self {
        Self {
            url,
            addr: r.target,
            healthy: r.outcome.healthy(),
            outcome: r.outcome.to_string(),
            elapsed: r.elapsed,
            http_status: None,
        }
    }

    pub fn udp(url: &'a str, addr: SocketAddr, outcome: UdpOutcome, elapsed: Duration) -> Self {
        Self {
            url,
            addr,
            healthy: outcome.healthy(),
            outcome: outcome.to_string(),
            elapsed,
            http_status: None,
        }
    }

    /// An agent's answer: healthy when it answered a line that does not hold the backend
    /// down (no line tells nothing, and fails here).
    pub fn agent(url: &'a str, addr: SocketAddr, asked: &probed::probe::agent::Asked) -> Self {
        use probed::probe::agent::{AgentAnswer, AgentHealth};
        Self {
            url,
            addr,
            healthy: matches!(&asked.answer, AgentAnswer::Reply(r) if !matches!(r.health, Some(AgentHealth::Down(_)))),
            outcome: asked.answer.to_string(),
            elapsed: asked.elapsed,
            http_status: None,
        }
    }

    pub fn render(&self, json: bool) -> String {
        let verdict = if self.healthy { "healthy" } else { "unhealthy" };
        let ms = self.elapsed.as_secs_f64() * 1000.0;
        if json {
            let mut v = serde_json::json!({
                "target": self.url,
                "address": self.addr.to_string(),
                "verdict": verdict,
                "outcome": self.outcome,
                "time_ms": (ms * 1000.0).round() / 1000.0,
            });
            if let Some(status) = self.http_status {
                v["status"] = serde_json::json!(status);
            }
            v.to_string()
        } else {
            format!("{} ({}) {verdict} {} {ms:.2}ms", self.url, self.addr, self.outcome)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(http_status: Option<Option<u16>>) -> Line<'static> {
        Line {
            url: "tcp://198.18.0.2:80",
            addr: "198.18.0.2:80".parse().unwrap(),
            healthy: true,
            outcome: "open".into(),
            elapsed: Duration::from_micros(1500),
            http_status,
        }
    }

    #[test]
    fn text_and_json_carry_the_same_fields() {
        assert_eq!(
            line(None).render(false),
            "tcp://198.18.0.2:80 (198.18.0.2:80) healthy open 1.50ms"
        );
        let v: serde_json::Value = serde_json::from_str(&line(None).render(true)).unwrap();
        assert_eq!(v["verdict"], "healthy");
        assert_eq!(v["time_ms"], 1.5);
        assert!(v.get("status").is_none(), "L4 lines have no status: {v}");
        let v: serde_json::Value = serde_json::from_str(&line(Some(None)).render(true)).unwrap();
        assert!(v["status"].is_null());
        let v: serde_json::Value = serde_json::from_str(&line(Some(Some(204))).render(true)).unwrap();
        assert_eq!(v["status"], 204);
    }
}
