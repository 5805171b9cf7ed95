//! probe_rx in a real prober namespace counts exactly the replies the kernel's own TCP stack
//! receives: one SYN+ACK from an open port, one RST from a closed one, one ICMP error from an
//! nftables reject, over IPv4 and IPv6.
use std::{
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use probed::kernel::{pin::PinDir, rx::RxProgram};
use probed_tests::{topo::*, TestPins, Topology};

const OPEN: u16 = 8080;
const CLOSED: u16 = 8081;
const REJECTED: u16 = 8082;

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = addr.parse().unwrap();
    TcpStream::connect_timeout(&addr, Duration::from_secs(3))
}

#[test]
fn counts_synack_rst_and_icmp_unreachable_exactly() {
    let topo = Topology::new();
    let _v4 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:{OPEN}"));
    let _v6 = topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:{OPEN}"));
    topo.backend
        .nft_reject_icmp("tcp", REJECTED, "admin-prohibited", "admin-prohibited");
    let pins = TestPins::new();

    topo.prober.enter(|| {
        let rx = RxProgram::attach(
            PROBER_IF,
            probed_tests::l4::xdp_mode(),
            PinDir::create(&pins.path).unwrap(),
        )
        .unwrap_or_else(|e| panic!("attach probe_rx: {e:?}"));
        assert!(pins.path.join("PROBE_RX_COUNTERS").exists(), "counters map is pinned");

        let mut held = Vec::new();
        for host in [BACKEND_V4.to_string(), format!("[{BACKEND_V6}]")] {
            held.push(connect(&format!("{host}:{OPEN}")).expect("open port accepts"));
            let refused = connect(&format!("{host}:{CLOSED}")).expect_err("closed port refuses");
            assert_eq!(
                refused.kind(),
                std::io::ErrorKind::ConnectionRefused,
                "{host}: {refused}"
            );
            let rejected = connect(&format!("{host}:{REJECTED}")).expect_err("rejected port fails");
            assert_ne!(
                rejected.kind(),
                std::io::ErrorKind::TimedOut,
                "{host}: the ICMP error arrived: {rejected}"
            );
        }
        let c = rx.counters().unwrap();
        assert_eq!((c.syn_ack, c.rst), (2, 2), "counters: {c:?}");
        // The stack may retransmit a SYN when an ICMP error lands while connect() still holds
        // the socket, so the exact figure is one error per SYN the backend rejected.
        let rejected = topo.backend.nft_packets(REJECTED);
        assert!(rejected >= 2, "backend rejected {rejected} SYNs");
        assert_eq!(
            c.icmp_unreach, rejected,
            "one ICMP error counted per rejected SYN: {c:?}"
        );
        drop(held);
    });
}
