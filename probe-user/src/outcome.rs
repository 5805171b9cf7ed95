//! What a probe found, as one vocabulary for every kind: the `outcome` of a result in the API,
//! the events and the `probed_probe_results_total` label. The human detail (which status,
//! which ICMP code, which TLS error) stays in the result's `reason`.
//! Each prober maps its own outcome onto this next to where that outcome is defined.
use crate::wire_enum::wire_enum;

wire_enum! {
    #[derive(Debug, Hash)]
    pub enum Outcome {
        /// TCP: SYN+ACK.
        Open = "open",
        /// TCP: RST to the SYN.
        Refused = "refused",
        /// TCP: reset after the connection was established (HTTP).
        Reset = "reset",
        /// The server closed the connection without a complete response (HTTP).
        Closed = "closed",
        /// ICMP destination unreachable other than port unreachable.
        Unreachable = "unreachable",
        /// UDP: ICMP port unreachable.
        PortUnreachable = "port-unreachable",
        /// No route to the target from this node.
        NoRoute = "no-route",
        /// No answer within the timeout (the reason names the phase for HTTP).
        Timeout = "timeout",
        /// UDP plain mode: no ICMP error within the timeout (healthy).
        Silent = "silent",
        /// UDP request/response: a reply with the expected content (healthy).
        Reply = "reply",
        /// UDP request/response: a reply without it.
        ReplyMismatch = "reply-mismatch",
        /// HTTP: a status in the healthy set (healthy).
        Status = "status",
        /// HTTP: a status outside the healthy set.
        BadStatus = "bad-status",
        /// HTTP: a healthy status whose body lacks the expected string.
        BodyMismatch = "body-mismatch",
        /// gRPC: the health service answered SERVING (healthy).
        Serving = "serving",
        /// gRPC: the health service answered another status (the reason names it).
        NotServing = "not-serving",
        /// gRPC: the call ended with an error status (the reason names the code).
        GrpcStatus = "grpc-status",
        /// HTTP: the TLS handshake failed.
        Tls = "tls",
        /// HTTP: another connect error.
        ConnectError = "connect-error",
        /// HTTP: a response that could not be parsed.
        HttpError = "http-error",
        /// The probe's own socket failed: it says nothing about the target.
        SocketError = "socket-error",
        /// No result came within the probe's timeout and a grace (a lost probe, a stuck engine):
        /// says nothing about the target, and is not fed to its threshold machine.
        Lost = "lost",
        /// This node ran out of something the probe needed (file descriptors, socket buffers,
        /// memory, local ports): says nothing about the target, and is not fed to its threshold
        /// machine, so a local user who exhausts the node's resources cannot fail its backends.
        LocalError = "local-error",
    }
}

impl Outcome {
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
