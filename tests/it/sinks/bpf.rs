//! The bpf sink with real traffic: probed keeps a pinned slot table (probe_common::slots) and
//! an XDP load balancer fixture on the LB node's client side forwards through it. SYNs from
//! many client connections reach all three backends; a failed backend stops getting new ones
//! after its fail window without any other slot moving, and gets them again after it is back.
use std::{collections::BTreeMap, net::IpAddr, time::Duration};

use aya::maps::{Array, Map, MapData};
use probe_common::slots::{SlotBackend, SlotControl, SLOT_ABI_VERSION};
use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    lb::{add_backends, count_ruleset, doc_block, go_dark, restore, send_syns, syns, wait_until, Backend, SlotLb},
    topo::*,
};

const VIP: &str = "198.18.100.100";
const BACKENDS: [&str; 3] = ["198.18.0.2", "198.18.0.3", "198.18.0.4"];

/// The live half of the pinned table, by slot, and the control entry.
fn table(paths: &(std::path::PathBuf, std::path::PathBuf)) -> (SlotControl, BTreeMap<u32, IpAddr>) {
    let open = |p: &std::path::Path| Map::from_map_data(MapData::from_pin(p).unwrap()).unwrap();
    let ctl: Array<_, SlotControl> = Array::try_from(open(&paths.1)).unwrap();
    let slots: Array<_, SlotBackend> = Array::try_from(open(&paths.0)).unwrap();
    let c = ctl.get(&0, 0).unwrap();
    let live = (0..c.slots)
        .filter_map(|i| {
            let b = slots.get(&(c.active * c.slots + i), 0).unwrap();
            b.is_valid()
                .then(|| (i, IpAddr::from([b.addr[0], b.addr[1], b.addr[2], b.addr[3]])))
        })
        .collect();
    (c, live)
}

#[test]
fn an_xdp_load_balancer_forwards_through_the_pinned_slot_table() {
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &BACKENDS[1..]);
    let _servers: Vec<Backend> = BACKENDS.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    topo.backend.nft(&count_ruleset(&BACKENDS));
    let files = DaemonFiles::new();
    let mut text = files.header(PROBER_IF)
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"weighted\"\n\n[profile.health]\n\
           protocol = \"tcp\"\nport = 80\ninterval = \"100ms\"\ntimeout = \"100ms\"\nhealthy_threshold = 2\n\
           unhealthy_threshold = 2\n";
    for (i, b) in BACKENDS.iter().enumerate() {
        text += &format!("\n[[profile.endpoint]]\nname = \"b{i}\"\naddress = \"{b}\"\n");
    }
    // The sink as docs/operations/sinks.md configures it.
    text += &("\n".to_string() + &doc_block("bpf-sink"));
    let cfg = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start the daemon");
    let paths = probed::sinks::bpf::pin_paths(&files.pins.path, "web_lb");
    for b in ["b0", "b1", "b2"] {
        daemon.wait_status("web", b, S::Online, Duration::from_secs(5));
    }
    wait_until(
        "the table holds 64 slots over three backends",
        Duration::from_secs(2),
        || {
            let (_, t) = table(&paths);
            t.len() == 64 && BACKENDS.iter().all(|b| t.values().any(|v| v.to_string() == *b))
        },
    );
    let (ctl, before) = table(&paths);
    assert_eq!((ctl.version, ctl.slots), (SLOT_ABI_VERSION, 64));
    let _lb = SlotLb::attach(&topo.prober, LB_IF, [198, 18, 100, 100], &paths.0, &paths.1);

    send_syns(&client, VIP, 150);
    for b in &BACKENDS {
        assert!(
            syns(&topo.backend, b) > 15,
            "{b} gets its share: {}",
            syns(&topo.backend, b)
        );
    }

    // b1 fails: after its fail window the live half no longer names it, nothing else moved.
    go_dark(&topo.backend, BACKENDS[1]);
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(3));
    wait_until("b1 leaves the table", Duration::from_secs(1), || {
        !table(&paths).1.values().any(|v| v.to_string() == BACKENDS[1])
    });
    let (ctl2, without) = table(&paths);
    assert!(ctl2.generation > ctl.generation, "a flip published it");
    for (slot, b) in &before {
        if b.to_string() != BACKENDS[1] {
            assert_eq!(&without[slot], b, "slot {slot} of a healthy backend did not move");
        }
    }
    let dark = syns(&topo.backend, BACKENDS[1]);
    let others: u64 = [BACKENDS[0], BACKENDS[2]].iter().map(|b| syns(&topo.backend, b)).sum();
    send_syns(&client, VIP, 150);
    assert_eq!(
        syns(&topo.backend, BACKENDS[1]),
        dark,
        "no new flow reaches the failed backend"
    );
    let others_after: u64 = [BACKENDS[0], BACKENDS[2]].iter().map(|b| syns(&topo.backend, b)).sum();
    assert!(others_after >= others + 150, "the other two take every flow");

    // Back after its success window.
    restore(&topo.backend);
    daemon.wait_status("web", "b1", S::Online, Duration::from_secs(3));
    wait_until("b1 returns to the table", Duration::from_secs(1), || {
        table(&paths).1.values().any(|v| v.to_string() == BACKENDS[1])
    });
    send_syns(&client, VIP, 150);
    assert!(syns(&topo.backend, BACKENDS[1]) > dark + 15, "b1 gets new flows again");
    daemon.stop();
    // Fail-static: the pins outlive the daemon, still naming every backend.
    assert_eq!(table(&paths).1.len(), 64);
}
