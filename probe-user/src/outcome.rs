//! What a probe found, as one vocabulary for every kind: the `outcome` of a result in the API,
//! the events and the `probed_probe_results_total` label. The human detail (which status,
//! which ICMP code, which TLS error) stays in the result's `reason`.
//! Each prober maps its own outcome onto this next to where that outcome is defined.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// TCP: SYN+ACK.
    Open,
    /// TCP: RST to the SYN.
    Refused,
    /// TCP: reset after the connection was established (HTTP).
    Reset,
    /// The server closed the connection without a complete response (HTTP).
    Closed,
    /// ICMP destination unreachable other than port unreachable.
    Unreachable,
    /// UDP: ICMP port unreachable.
    PortUnreachable,
    /// No route to the target from this node.
    NoRoute,
    /// No answer within the timeout (the reason names the phase for HTTP).
    Timeout,
    /// UDP plain mode: no ICMP error within the timeout (healthy).
    Silent,
    /// UDP request/response: a reply with the expected content (healthy).
    Reply,
    /// UDP request/response: a reply without it.
    ReplyMismatch,
    /// HTTP: a status in the healthy set (healthy).
    Status,
    /// HTTP: a status outside the healthy set.
    BadStatus,
    /// HTTP: a healthy status whose body lacks the expected string.
    BodyMismatch,
    /// HTTP: the TLS handshake failed.
    Tls,
    /// HTTP: another connect error.
    ConnectError,
    /// HTTP: a response that could not be parsed.
    HttpError,
    /// The probe's own socket failed: it says nothing about the target.
    SocketError,
    /// No result came within the probe's timeout and a grace (a lost probe, a stuck engine):
    /// says nothing about the target, and is not fed to its threshold machine.
    Lost,
    /// This node ran out of something the probe needed (file descriptors, socket buffers,
    /// memory, local ports): says nothing about the target, and is not fed to its threshold
    /// machine, so a local user who exhausts the node's resources cannot fail its backends.
    LocalError,
}

impl Outcome {
    /// The name on the wire and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Open => "open",
            Outcome::Refused => "refused",
            Outcome::Reset => "reset",
            Outcome::Closed => "closed",
            Outcome::Unreachable => "unreachable",
            Outcome::PortUnreachable => "port-unreachable",
            Outcome::NoRoute => "no-route",
            Outcome::Timeout => "timeout",
            Outcome::Silent => "silent",
            Outcome::Reply => "reply",
            Outcome::ReplyMismatch => "reply-mismatch",
            Outcome::Status => "status",
            Outcome::BadStatus => "bad-status",
            Outcome::BodyMismatch => "body-mismatch",
            Outcome::Tls => "tls",
            Outcome::ConnectError => "connect-error",
            Outcome::HttpError => "http-error",
            Outcome::SocketError => "socket-error",
            Outcome::Lost => "lost",
            Outcome::LocalError => "local-error",
        }
    }

    /// Whether the outcome is a verdict on the target. Those that are not (a lost probe, a
    /// local resource error) are reported and counted but leave the endpoint's health as it is.
    pub fn is_verdict(self) -> bool {
        !matches!(self, Outcome::Lost | Outcome::LocalError)
    }
}

/// Whether a socket errno means this node is short of a resource, not that the target failed:
/// out of file descriptors (per process or system-wide), socket buffers, memory, or free
/// local ports for a connect.
pub fn is_local_resource_errno(errno: i32) -> bool {
    matches!(
        errno,
        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_match_serde() {
        for o in [
            Outcome::PortUnreachable,
            Outcome::NoRoute,
            Outcome::BadStatus,
            Outcome::Open,
            Outcome::LocalError,
        ] {
            assert_eq!(serde_json::to_string(&o).unwrap(), format!("\"{}\"", o.as_str()));
        }
    }

    #[test]
    fn only_lost_and_local_errors_are_not_verdicts() {
        assert!(!Outcome::Lost.is_verdict());
        assert!(!Outcome::LocalError.is_verdict());
        for o in [
            Outcome::Timeout,
            Outcome::SocketError,
            Outcome::ConnectError,
            Outcome::Refused,
        ] {
            assert!(o.is_verdict(), "{o:?}");
        }
    }

    #[test]
    fn resource_errnos_are_local() {
        for e in [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOBUFS,
            libc::ENOMEM,
            libc::EADDRNOTAVAIL,
        ] {
            assert!(is_local_resource_errno(e), "{e}");
        }
        for e in [libc::ECONNREFUSED, libc::EHOSTUNREACH, libc::EPERM, libc::ETIMEDOUT] {
            assert!(!is_local_resource_errno(e), "{e}");
        }
    }
}
