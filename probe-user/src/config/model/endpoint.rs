//! `[[profile.endpoint]]`: plain and nested endpoints, and what one may set of its check.
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::Serialize;

use super::*;

/// `[[profile.endpoint]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Endpoint {
    /// Unique within the profile; defaults to `address:port`.
    pub name: std::sync::Arc<str>,
    pub address: IpAddr,
    /// The port probed: the endpoint's own, else the health check's, else 80/443 for HTTP(S).
    pub port: u16,
    pub weight: u32,
    pub priority: u32,
    pub state: AdminState,
    /// What most endpoints leave out, in a box of its own when set (`extra()`).
    #[serde(flatten)]
    pub extra: Extra,
}

/// An endpoint's less common settings: request headers, DNS subnets and region, the HAProxy
/// server name. Boxed, and only when any is set: a million endpoints stay in the running
/// config, and 64 bytes of empty slices and `None`s in each were 64 MB of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra(Option<Box<EndpointExtra>>);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointExtra {
    pub headers: Box<[Header]>,
    pub subnets: Box<[IpNet]>,
    pub region: Option<Box<str>>,
    /// The HAProxy server a `haproxy` sink writes for this endpoint; None means its name.
    pub haproxy_server: Option<Box<str>>,
    /// The endpoint's own TLS keys (and gRPC service) in place of its profile's.
    pub check: Option<Box<CheckOverride>>,
}

impl Extra {
    /// The box, or none when everything in it is left out.
    pub fn of(extra: EndpointExtra) -> Self {
        Self((extra != EndpointExtra::default()).then(|| Box::new(extra)))
    }
}

impl Serialize for Extra {
    /// Always the four keys, empty or null when left out, as one struct wrote them.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let none = EndpointExtra::default();
        let x = self.0.as_deref().unwrap_or(&none);
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("headers", &x.headers)?;
        m.serialize_entry("subnets", &x.subnets)?;
        m.serialize_entry("region", &x.region)?;
        m.serialize_entry("haproxy_server", &x.haproxy_server)?;
        // Only when set: a config without it serializes as before.
        if let Some(check) = &x.check {
            m.serialize_entry("check", check)?;
        }
        m.end()
    }
}

// The running config keeps every endpoint: 56 bytes each (152 with Vec and String, 120 with
// the less common settings inline, 64 with the name a `String`). The name is an `Arc` that
// the endpoint's target and DNS record share instead of a copy each.
const _: () = assert!(std::mem::size_of::<Endpoint>() <= 56);

impl Endpoint {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }

    fn extra(&self) -> Option<&EndpointExtra> {
        self.extra.0.as_deref()
    }

    pub fn headers(&self) -> &[Header] {
        self.extra().map_or(&[], |x| &x.headers)
    }

    pub fn subnets(&self) -> &[IpNet] {
        self.extra().map_or(&[], |x| &x.subnets)
    }

    pub fn region(&self) -> Option<&str> {
        self.extra().and_then(|x| x.region.as_deref())
    }

    pub fn haproxy_server(&self) -> Option<&str> {
        self.extra().and_then(|x| x.haproxy_server.as_deref())
    }

    /// Its own TLS and gRPC keys, if it sets any.
    pub fn check_override(&self) -> Option<&CheckOverride> {
        self.extra().and_then(|x| x.check.as_deref())
    }
}

/// `[[profile.endpoint]]` with `profile = "CHILD"`: a nested profile (SPEC 8). Not probed:
/// its monitor status follows the child's endpoints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NestedEndpoint {
    /// Unique within the profile; defaults to the child's name.
    pub name: String,
    pub child: String,
    pub weight: u32,
    pub priority: u32,
    /// Enabled or disabled; always-serve is refused (SPEC 8: checks cannot be turned off).
    pub state: AdminState,
    pub subnets: Vec<IpNet>,
    pub region: Option<String>,
    /// Degraded while fewer of the child's endpoints are available (Online, CheckingEndpoint
    /// or Unmonitored); at least 1.
    pub min_child_endpoints: u32,
}

impl NestedEndpoint {
    pub const DEFAULT_MIN_CHILD_ENDPOINTS: u32 = 1;
}
