//! The demo fleet: one backend namespace with a healthy, a dead (dropped), a refusing and a
//! flapping TCP service, a fast and a slow HTTP service, an open and a closed UDP port, and the
//! probed configuration that checks them all. Shared by `probed-demo` and the daemon tests.
//! The node also answers DNS for `tm.example.` (on its client-facing address): `www` is the
//! flapping service with a standby at another address, by priority.
use probed::status::EndpointStatus;
use std::net::UdpSocket;

use crate::{
    daemon::DaemonFiles,
    http_server::{HttpServer, Route},
    lb::{add_backends, doc_block, Backend},
    topo::{BACKEND_V4, CLIENT_V4, LB_CLIENT_V4, PROBER_IF},
    Netns, Topology,
};

/// nftables table the flapping service's drop rule lives in, apart from the harness's own.
const FLAP_TABLE: &str = "probed_flap";
const FLAP_PORT: u16 = 8083;
/// The `www` name's standby, at an address of its own so that DNS answers show the failover.
const STANDBY: &str = "198.18.0.5";
/// Where the node answers DNS: its address on the clients' link.
pub const DNS_SERVER: &str = LB_CLIENT_V4;
/// (profile, endpoint, monitor status once settled); the flapping endpoint has none.
pub const EXPECTED: &[(&str, &str, EndpointStatus)] = &[
    ("tcp", "healthy", EndpointStatus::Online),
    ("tcp", "dead", EndpointStatus::Degraded),
    ("tcp", "refusing", EndpointStatus::Degraded),
    ("http", "web-fast", EndpointStatus::Online),
    ("http", "web-slow", EndpointStatus::Degraded),
    ("udp", "dns-open", EndpointStatus::Online),
    ("udp", "dns-closed", EndpointStatus::Degraded),
    ("udp", "dns-spare", EndpointStatus::Disabled),
    ("www", "standby", EndpointStatus::Online),
];

/// (parent profile, nested endpoint, status once settled): `site` over `www` and `tcp`.
pub const EXPECTED_NESTED: &[(&str, &str, EndpointStatus)] = &[
    ("site", "www", EndpointStatus::Online),
    ("site", "tcp", EndpointStatus::Online),
];

pub struct Fleet {
    // Servers first: they must stop before their namespace goes.
    _tcp: Vec<Backend>,
    _udp: UdpSocket,
    _web: Vec<HttpServer>,
    /// A client behind the prober's namespace, which load-balances VIP:80 over the "tcp"
    /// profile through the slot map the daemon's nftables sink fills.
    pub client: Netns,
    pub topo: Topology,
    pub files: DaemonFiles,
    flapping_down: bool,
}

/// The address clients reach the "tcp" profile's backends by.
pub const VIP: &str = "198.18.100.100";
/// The VIP the www profile's route sink announces (a route in kernel table 201).
pub const ROUTE_VIP: &str = "198.18.250.1";

impl Fleet {
    pub fn new() -> Self {
        let topo = Topology::new();
        let client = topo.client();
        add_backends(&topo, &[STANDBY]);
        let tcp = [8080, FLAP_PORT]
            .iter()
            .map(|p| Backend::on(&topo.backend, &format!("{BACKEND_V4}:{p}")))
            .chain([Backend::on(&topo.backend, &format!("{STANDBY}:8080"))])
            .collect();
        // The node's load balancer, as docs/operations/sinks.md shows it, and SYN counters at the
        // backends for what clients send through it.
        topo.prober.nft(&doc_block("lb-ruleset-demo"));
        topo.backend.nft(&format!(
            "table inet count {{\n\tchain input {{\n\t\ttype filter hook input priority -10; policy accept;\n             \t\tip saddr {CLIENT_V4} tcp dport 8080 tcp flags syn counter\n             \t\tip saddr {CLIENT_V4} tcp dport {FLAP_PORT} tcp flags syn counter\n\t}}\n}}\n"
        ));
        topo.backend.nft_drop("tcp", 8082);
        let fast = topo.backend.http_server(&format!("{BACKEND_V4}:8090"));
        fast.route("/health", Route::status(200));
        // Slower than the 250 ms timeout: every probe times out waiting for the response head.
        let slow = topo.backend.http_server(&format!("{BACKEND_V4}:8091"));
        slow.route(
            "/health",
            Route::status(200).delayed(std::time::Duration::from_millis(400)),
        );
        let web = vec![fast, slow];
        let udp = topo.backend.udp_bind(&format!("{BACKEND_V4}:5353"));
        // Linux rate-limits ICMP errors (1 per second per destination by default), which would
        // make the closed port look alive between errors: the UDP false "healthy" of SPEC 1.
        topo.backend.sysctl("net.ipv4.icmp_ratelimit", "0");
        let files = DaemonFiles::new();
        Self {
            _tcp: tcp,
            client,
            _udp: udp,
            _web: web,
            topo,
            files,
            flapping_down: false,
        }
    }

    /// The configuration: 200 ms interval and timeout, thresholds of 2, so every endpoint
    /// settles within about a second.
    pub fn config_text(&self) -> String {
        let timing = "interval = \"200ms\"\ntimeout = \"250ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n";
        let ep = |name: &str, port: u16, extra: &str| {
            format!("\n[[profile.endpoint]]\nname = \"{name}\"\naddress = \"{BACKEND_V4}\"\nport = {port}\n{extra}")
        };
        let mut text = self.files.header(PROBER_IF);
        text += &format!(
            "[[profile]]\nname = \"tcp\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\nprotocol = \"tcp\"\n{timing}"
        );
        text += &ep("healthy", 8080, "priority = 2\n");
        text += &ep("dead", 8082, "priority = 1\n");
        text += &ep("refusing", 8081, "priority = 3\n");
        text += &ep("flapping", FLAP_PORT, "priority = 4\n");
        text += &("\n".to_string() + &doc_block("demo-sink"));
        text += &format!(
            "\n[[profile]]\nname = \"http\"\ndialect = \"lb\"\nrouting = \"weighted\"\n\n[profile.health]\nprotocol = \"http\"\n\
             method = \"GET\"\npath = \"/health\"\n{timing}"
        );
        text += &ep("web-fast", 8090, "weight = 3\n");
        text += &ep("web-slow", 8091, "weight = 1\n");
        text += &format!(
            "\n[[profile]]\nname = \"udp\"\ndialect = \"lb\"\nrouting = \"multivalue\"\nmax_answers = 2\n\n[profile.health]\n\
             protocol = \"udp\"\nrequest = \"ping\"\n{timing}"
        );
        text += &ep("dns-open", 5353, "");
        text += &ep("dns-closed", 5354, "");
        text += &ep("dns-spare", 5355, "state = \"disabled\"\n");
        text += &format!(
            "\n[[profile]]\nname = \"www\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\nprotocol = \"tcp\"\n{timing}"
        );
        text += &ep("primary", FLAP_PORT, "priority = 1\n");
        text += &format!(
            "\n[[profile.endpoint]]\nname = \"standby\"\naddress = \"{STANDBY}\"\nport = 8080\npriority = 2\n"
        );
        // The node announces a VIP for www while both of its endpoints serve: a route in kernel
        // table 201 that a routing daemon (BIRD) would announce by BGP.
        text += &format!(
            "\n[[sink]]\nname = \"www-vip\"\nprofile = \"www\"\nkind = \"route\"\nprefixes = [\"{ROUTE_VIP}/32\"]\n\
             min_eligible = 2\nhold_down = \"1s\"\n"
        );
        // A parent of two nested profiles (SPEC 8): www first, the tcp pool behind it.
        text += &format!(
            "\n[[profile]]\nname = \"site\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\nprotocol = \"tcp\"\n{timing}"
        );
        text += "\n[[profile.endpoint]]\nprofile = \"www\"\npriority = 1\n\n[[profile.endpoint]]\nprofile = \"tcp\"\npriority = 2\n";
        text += &format!("\n[dns]\nlisten = [\"{DNS_SERVER}:53\"]\nzone = \"tm.example.\"\nttl = \"5s\"\n");
        text
    }

    /// What the node's DNS server answers the client for `www.tm.example.` A, as `dig +short`.
    pub fn dig_www(&self) -> String {
        self.client
            .exec(
                "dig",
                &[
                    &format!("@{DNS_SERVER}"),
                    "www.tm.example.",
                    "A",
                    "+short",
                    "+tries=1",
                    "+time=1",
                ],
            )
            .trim()
            .to_string()
    }

    /// Starts or stops dropping traffic to the flapping service.
    pub fn set_flapping_down(&mut self, down: bool) {
        if down == self.flapping_down {
            return;
        }
        if down {
            self.topo.backend.nft(&format!(
                "table inet {FLAP_TABLE} {{\n chain input {{\n type filter hook input priority 0; policy accept;\n \
                 tcp dport {FLAP_PORT} drop\n }}\n}}\n"
            ));
        } else {
            self.topo.backend.exec("nft", &["delete", "table", "inet", FLAP_TABLE]);
        }
        self.flapping_down = down;
    }

    pub fn flapping_down(&self) -> bool {
        self.flapping_down
    }

    /// The routes the www profile's route sink holds in the prober's kernel table 201, as
    /// `ip route show table 201` lists them (empty: withdrawn).
    pub fn vip_routes(&self) -> String {
        // The kernel says the table does not exist until a first route is written to it.
        let out = std::process::Command::new("ip")
            .args(["-n", &self.topo.prober.name, "route", "show", "table", "201"])
            .output()
            .expect("run ip");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Client SYNs that reached (healthy, flapping) so far.
    pub fn client_syns(&self) -> (u64, u64) {
        let listing = self.topo.backend.exec("nft", &["list", "table", "inet", "count"]);
        let at = |port: u16| crate::servers::counted_packets(&listing, &format!("dport {port} "));
        (at(8080), at(FLAP_PORT))
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}
