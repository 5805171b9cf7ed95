//! The one list of probe kinds. A line names the kind's field (for what its endpoints share),
//! its `Probe` variant and the settings it holds, the type in its folder that implements
//! `CheckKind` (with those settings), and the protocols it serves; `Probe`, `KindId`, the keys the reference lists, and every dispatch the reader,
//! the identity and the resolver need are made from it. A protocol served by no kind, or by
//! two, does not compile (the match in `kind_of` is exhaustive and its arms disjoint).
use std::time::Duration;

use serde::Serialize;

use super::{CheckKind, EndpointCheck, ProbeKind};
use crate::{
    rules::{Dialect, Protocol},
    schema::{
        keys::Key,
        read::{Reader, Table},
    },
};

macro_rules! kinds {
    ($(
        $(#[$doc:meta])*
        $field:ident: $variant:ident($settings:ty) by $kind:ty => [$($protocol:ident),+ $(,)?]
    ),+ $(,)?) => {
        /// What a probe sends and what counts as success: one kind's settings.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub enum Probe {
            $( $(#[$doc])* $variant($settings), )+
        }

        /// Which kind a protocol is.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum KindId {
            $( $(#[$doc])* $variant, )+
        }

        /// The kind that serves `p`.
        pub const fn kind_of(p: Protocol) -> KindId {
            match p {
                $( $(Protocol::$protocol)|+ => KindId::$variant, )+
            }
        }

        /// What the endpoints of one profile share while their checks are prepared, a field
        /// per kind.
        #[derive(Default)]
        pub struct Shared {
            $( $field: <$kind as CheckKind>::Shared, )+
        }

        /// The keys of `[profile.health]` beyond its own: every kind's, the road's (a tunnel,
        /// for the kinds that can take it) and the agent check's (which runs beside any).
        pub const HEALTH_KEYS: &[&[Key]] = &[ $( <$kind as CheckKind>::KEYS, )+ super::tunnel::KEYS, super::agent::KEYS ];

        /// The keys of `[[profile.endpoint]]` that kinds declare.
        pub const ENDPOINT_KEYS: &[&[Key]] = &[ $( <$kind as CheckKind>::ENDPOINT_KEYS, )+ ];

        /// Whether dialect `d` offers protocol `p`.
        pub fn offered(d: Dialect, p: Protocol) -> bool {
            match kind_of(p) {
                $( KindId::$variant => <$kind as CheckKind>::offered(d, p), )+
            }
        }

        /// The port probed when neither the endpoint nor the profile names one.
        pub fn default_port(p: Protocol) -> Option<u16> {
            match kind_of(p) {
                $( KindId::$variant => <$kind as CheckKind>::default_port(p), )+
            }
        }

        impl Probe {
            /// The settings of protocol `p`'s kind from the health table `t`.
            pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, p: Protocol) -> Option<Probe> {
                match kind_of(p) {
                    $( KindId::$variant => <$kind as CheckKind>::read(r, t, d, p).map(Probe::$variant), )+
                }
            }

            pub fn kind(&self) -> KindId {
                match self {
                    $( Probe::$variant(_) => KindId::$variant, )+
                }
            }

            pub fn protocol(&self) -> Protocol {
                match self {
                    $( Probe::$variant(s) => <$kind as CheckKind>::protocol(s), )+
                }
            }

            /// What a probe sends and expects, for the check's identity.
            pub fn identity(&self, endpoint: &EndpointCheck<'_>, out: &mut String) {
                match self {
                    $( Probe::$variant(s) => <$kind as CheckKind>::identity(s, endpoint, out), )+
                }
            }

            /// The same as releases before `k2` wrote it.
            pub fn legacy(&self, endpoint: &EndpointCheck<'_>) -> String {
                match self {
                    $( Probe::$variant(s) => <$kind as CheckKind>::legacy(s, endpoint), )+
                }
            }

            /// The check `endpoint` runs, sharing what it can with the profile's other
            /// endpoints through `shared`.
            pub fn prepare(
                &self,
                endpoint: &EndpointCheck<'_>,
                timeout: Duration,
                shared: &mut Shared,
            ) -> Result<ProbeKind, Box<dyn std::error::Error + Send + Sync>> {
                match self {
                    $( Probe::$variant(s) => <$kind as CheckKind>::prepare(s, endpoint, timeout, &mut shared.$field)
                        .map_err(Into::into), )+
                }
            }
        }
    };
}

kinds! {
    /// A TCP handshake, in the kernel engine.
    tcp: Tcp(super::tcp::TcpCheck) by super::tcp::Tcp => [Tcp],
    /// A UDP datagram: in the kernel engine when silence is the answer, a task when a reply is.
    udp: Udp(super::udp::UdpCheck) by super::udp::Udp => [Udp],
    /// An HTTP(S) request or a gRPC health check, a task or whole in the kernel.
    http: Http(Box<super::http::config::HttpSettings>) by super::http::Http => [Http, Https, Grpc, Grpcs],
}

impl Probe {
    /// The offered protocols of dialect `d`, in the order of `Protocol::ALL`.
    pub fn protocols(d: Dialect) -> Vec<Protocol> {
        Protocol::ALL.iter().copied().filter(|p| offered(d, *p)).collect()
    }
}

impl Probe {
    /// The data path's tunnel a check takes (`tunnel::TunnelTo`), if it does.
    pub fn tunnel(&self) -> Option<&super::tunnel::TunnelTo> {
        match self {
            Self::Tcp(t) => t.tunnel.as_ref(),
            Self::Http(h) => h.tunnel.as_ref(),
            Self::Udp(u) => u.tunnel.as_ref(),
        }
    }

    /// The service address a tunnelled check sends to inside its tunnel.
    pub fn tunnel_vip(&self) -> Option<std::net::IpAddr> {
        self.tunnel().map(|t| t.vip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialects_ports_and_kinds_as_the_kinds_say() {
        assert_eq!(Probe::protocols(Dialect::Lb), Protocol::ALL.to_vec());
        assert_eq!(Probe::protocols(Dialect::Tm), Probe::protocols(Dialect::Ga));
        assert!(!Probe::protocols(Dialect::Tm).contains(&Protocol::Udp));
        assert_eq!(default_port(Protocol::Http), Some(80));
        assert_eq!(default_port(Protocol::Https), Some(443));
        for p in [Protocol::Tcp, Protocol::Udp, Protocol::Grpc, Protocol::Grpcs] {
            assert_eq!(default_port(p), None, "{p}");
        }
        assert_eq!(kind_of(Protocol::Grpcs), KindId::Http);
    }
}
