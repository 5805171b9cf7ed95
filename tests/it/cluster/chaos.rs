//! The cluster under churn and attack, with real daemons: four nodes (three in this process, one
//! a `probed run` process whose clock is 20 s ahead, under faketime) probe the same 24 targets
//! (18 up, 6 refusing) and share verdicts, while
//! - node 0 reloads four times, its verdicts going from 1 bucket to 32, back to 1, to 16 and
//!   to 32 (an extra profile of its own, 1,100 or 600 checks, changes their number);
//! - node 1 is cut off from the others' gossip for 4 s, then the partition heals;
//! - node 3 is killed (SIGKILL) and started again;
//! - a gossip datagram captured on the way is replayed to its node and to another one from a
//!   victim's address.
//!
//! Sampled every 250 ms on every node, the invariants: every node's status of every target is
//! the ground truth (Online or Degraded) the whole time, so nothing flaps; a node that has been
//! a member for 2 s has its vote on every target in every other node's view, never missing for
//! longer than 1 s (10 gossip intervals); and the victim receives nothing.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    forge::send_raw_v4,
    probed_bin,
    procs::Proc,
    star::{cluster_section, target, Rig, Star, NODE_IF, TARGET_PORT},
    Netns,
};
use serde_json::Value;

const NODES: usize = 4;
const UP: usize = 18;
const DOWN: usize = 6;
/// Nothing listens there: those targets are refused.
const DOWN_PORT: u16 = 8081;
/// The longest a settled member's vote may be missing from another node's view.
const MAX_MISSING: Duration = Duration::from_secs(1);
/// How long a member must have been one before its votes must be everywhere.
const SETTLE: Duration = Duration::from_secs(2);

fn truth(j: usize) -> &'static str {
    if j < UP {
        "Online"
    } else {
        "Degraded"
    }
}

/// Node `i`'s configuration: the shared profile, and (node 0) `extra` checks of its own.
fn config(files: &DaemonFiles, i: usize, key: &Path, extra: usize) -> String {
    let mut text = files.header(NODE_IF) + &cluster_section(i, 0, key, "100ms");
    text += "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
             interval = \"200ms\"\ntimeout = \"200ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n";
    for j in 0..UP + DOWN {
        let port = if j < UP { TARGET_PORT } else { DOWN_PORT };
        text += &format!(
            "\n[[profile.endpoint]]\nname = \"t{j}\"\naddress = \"{}\"\nport = {port}\n",
            target(j)
        );
    }
    if extra > 0 {
        text += "\n[[profile]]\nname = \"extra\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
                 interval = \"5s\"\ntimeout = \"1s\"\n";
        for j in 0..extra {
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 1, 1)) + u32::try_from(j).unwrap());
            text += &format!("\n[[profile.endpoint]]\nname = \"x{j}\"\naddress = \"{ip}\"\nport = {TARGET_PORT}\n");
        }
    }
    text
}

/// A node: in this process, or a `probed run` process (node 3, its clock 20 s ahead).
enum Node {
    Here(RunningDaemon),
    Process(Proc),
    Down,
}

/// `GET path` on node `i`'s API.
fn get(api: &str, path: &str) -> Option<Value> {
    let r = probed::api::client::request(api, "GET", path).ok()?;
    (r.status == 200).then(|| serde_json::from_str(&r.body).ok()).flatten()
}

/// One node's view: its members, and per target its status and the nodes that voted.
struct View {
    members: BTreeSet<String>,
    targets: Vec<(String, BTreeSet<String>)>,
}

fn view(api: &str) -> Option<View> {
    let cluster = get(api, "/v1/cluster")?;
    let status = get(api, "/v1/status/web")?;
    let members = cluster["members"]
        .as_array()?
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    let targets = status["endpoints"]
        .as_array()?
        .iter()
        .map(|e| {
            let voters = e["cluster"]["locations"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .filter_map(|x| x["node"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            (e["status"].as_str().unwrap_or("?").to_string(), voters)
        })
        .collect();
    Some(View { members, targets })
}

/// What the sampler found wrong, and its figures.
#[derive(Default)]
struct Findings {
    samples: u64,
    /// (observer, target, status seen, what truth says, when).
    wrong_status: Vec<(usize, usize, String, Duration)>,
    /// The longest a settled member's vote was missing: (observer, voter, target) -> longest.
    missing: BTreeMap<(usize, String, usize), Duration>,
}

/// Captures one gossip datagram (its IP packet) sent to node `to` as it crosses the backend.
fn capture_gossip(backend: &Netns, to: &str, within: Duration) -> Vec<u8> {
    let to: Ipv4Addr = to.parse().unwrap();
    backend.enter(|| {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: plain socket(2), checked below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto)) };
        assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: a valid timeval for SO_RCVTIMEO on our socket.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                u32::try_from(std::mem::size_of::<libc::timeval>()).unwrap(),
            );
        }
        let deadline = Instant::now() + within;
        let mut buf = vec![0u8; 65_536];
        let found = loop {
            assert!(
                Instant::now() < deadline,
                "no gossip datagram to {to} within {within:?}"
            );
            // SAFETY: `buf` is valid for its length.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            let Ok(n) = usize::try_from(n) else { continue };
            let p = &buf[..n];
            if n > 28 && p[0] >> 4 == 4 && p[9] == 17 && p[16..20] == to.octets() {
                let ihl = usize::from(p[0] & 0xf) * 4;
                if u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]) == 7946 {
                    break p.to_vec();
                }
            }
        };
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(fd) };
        found
    })
}

/// `packet` (IPv4 + UDP) from `src:src_port` to `dst`, checksums left out (UDP) or to the
/// kernel (IP).
fn readdress(packet: &[u8], src: Ipv4Addr, src_port: u16, dst: Ipv4Addr) -> Vec<u8> {
    let mut p = packet.to_vec();
    let ihl = usize::from(p[0] & 0xf) * 4;
    p[10..12].copy_from_slice(&[0, 0]);
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p[ihl..ihl + 2].copy_from_slice(&src_port.to_be_bytes());
    p[ihl + 6..ihl + 8].copy_from_slice(&[0, 0]);
    p
}

fn datagrams(api: &str, result: &str) -> u64 {
    get(api, "/v1/cluster").map_or(0, |c| c["datagrams"][result].as_u64().unwrap_or(0))
}

fn start_process(rig: &Rig, i: usize) -> Proc {
    let files = &rig.files[i];
    let log = files.dir.join(format!("n{i}.log"));
    Proc::spawn(
        &rig.star.nodes[i],
        None,
        &[
            "env",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
            "faketime",
            "-f",
            "+20s",
            probed_bin().to_str().unwrap(),
            "run",
            "--config",
            files.config_path().to_str().unwrap(),
        ],
        &log,
        "a probed node 20 s ahead",
    )
}

/// Polls `ok` every 100 ms; how long it took.
fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

#[test]
fn votes_stay_whole_and_nothing_flaps_through_reloads_partitions_restarts_skew_and_replays() {
    let rig = Rig::new(NODES);
    // The extra profile's addresses (198.19.1.1 on) answer too.
    rig.star.anyip("198.19.0.0/20");
    let apis: Vec<String> = rig.files.iter().map(DaemonFiles::api).collect();
    // Node 3 reads its file itself (`probed run`).
    let f3 = &rig.files[NODES - 1];
    std::fs::write(f3.config_path(), config(f3, NODES - 1, &rig.key, 0)).unwrap();
    let mut nodes: Vec<Node> = (0..NODES - 1)
        .map(|i| {
            let f = &rig.files[i];
            let cfg = f.write_config(&config(f, i, &rig.key, 0));
            Node::Here(RunningDaemon::start(&rig.star.nodes[i], cfg, Some(&f.config_path())).unwrap())
        })
        .collect();
    nodes.push(Node::Process(start_process(&rig, NODES - 1)));
    let everyone: BTreeSet<String> = (0..NODES).map(|i| format!("n{i}")).collect();
    let converged = wait_for(
        "four members, every target at its truth with four votes, everywhere",
        Duration::from_secs(30),
        || {
            apis.iter().all(|api| {
                view(api).is_some_and(|v| {
                    v.members == everyone
                        && v.targets.len() == UP + DOWN
                        && v.targets
                            .iter()
                            .enumerate()
                            .all(|(j, (s, voters))| s == truth(j) && *voters == everyone)
                })
            })
        },
    );
    let events_before: Vec<usize> = nodes
        .iter()
        .map(|n| match n {
            Node::Here(d) => d.events().len(),
            _ => 0,
        })
        .collect();

    // The sampler, on every node that answers.
    let findings = Mutex::new(Findings::default());
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // (observer, voter) -> member since; (observer, voter, target) -> missing since.
            let mut member_since: BTreeMap<(usize, String), Instant> = BTreeMap::new();
            let mut missing_since: BTreeMap<(usize, String, usize), Instant> = BTreeMap::new();
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                for (o, api) in apis.iter().enumerate() {
                    let Some(v) = view(api) else {
                        // Down (killed): it observes nothing; forget its clocks.
                        member_since.retain(|(x, _), _| *x != o);
                        missing_since.retain(|(x, _, _), _| *x != o);
                        continue;
                    };
                    let mut f = findings.lock().unwrap();
                    f.samples += 1;
                    member_since.retain(|(x, voter), _| *x != o || v.members.contains(voter));
                    for m in &v.members {
                        member_since.entry((o, m.clone())).or_insert(now);
                    }
                    for (j, (status, voters)) in v.targets.iter().enumerate() {
                        if status != truth(j) {
                            f.wrong_status.push((o, j, status.clone(), started.elapsed()));
                        }
                        for m in &v.members {
                            let key = (o, m.clone(), j);
                            let settled = member_since.get(&(o, m.clone())).is_some_and(|t| now - *t >= SETTLE);
                            if voters.contains(m) || !settled {
                                missing_since.remove(&key);
                                continue;
                            }
                            let since = *missing_since.entry(key.clone()).or_insert(now);
                            let longest = f.missing.entry(key).or_default();
                            *longest = (*longest).max(now - since);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });

        let reload = |nodes: &[Node], extra: usize| {
            let f = &rig.files[0];
            std::fs::write(f.config_path(), config(f, 0, &rig.key, extra)).unwrap();
            let Node::Here(d) = &nodes[0] else { unreachable!() };
            let (code, v) = d.call("POST", "/v1/reload");
            assert_eq!(code, 200, "reload to {extra} extra checks: {v}");
            std::thread::sleep(Duration::from_secs(3));
        };
        // Node 0's buckets: 1 -> 32 -> 1 -> 16 -> 32 -> 1.
        for extra in [1_100, 0, 600, 1_100, 0] {
            reload(&nodes, extra);
        }

        // Node 1 cut off from the others' gossip, then back.
        let n1 = Star::addr(1);
        rig.star.backend.nft(&format!(
            "table inet probed_part {{\n chain forward {{\n type filter hook forward priority 0; policy accept;\n \
             ip saddr {n1} udp dport 7946 drop\n ip daddr {n1} udp dport 7946 drop\n }}\n}}\n"
        ));
        std::thread::sleep(Duration::from_secs(4));
        rig.star
            .backend
            .exec("nft", &["delete", "table", "inet", "probed_part"]);
        let healed = wait_for("the partition heals", Duration::from_secs(20), || {
            apis.iter().all(|api| view(api).is_some_and(|v| v.members == everyone))
        });
        eprintln!(
            "first convergence {converged:?}; partition healed (all members everywhere) {healed:?} after it ended"
        );

        // Node 3 killed, and started again after 2 s.
        let Node::Process(p) = &nodes[3] else { unreachable!() };
        // SAFETY: kill(2) on the pid of a child we started and still hold.
        unsafe { libc::kill(i32::try_from(p.pid()).unwrap(), libc::SIGKILL) };
        nodes[3] = Node::Down;
        std::thread::sleep(Duration::from_secs(2));
        nodes[3] = Node::Process(start_process(&rig, 3));
        let back = wait_for("the restarted node is back everywhere", Duration::from_secs(30), || {
            apis.iter().all(|api| view(api).is_some_and(|v| v.members == everyone))
        });
        eprintln!("the killed node, started again, a member everywhere {back:?} after its start");

        // A captured datagram, replayed from a victim's address to its node and to another.
        let victim_addr: Ipv4Addr = Star::gateway(1).parse().unwrap();
        let victim = rig.star.backend.udp_bind(&format!("{victim_addr}:40000"));
        victim.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let (replayed_before, misdirected_before) =
            (datagrams(&apis[1], "replayed"), datagrams(&apis[2], "misdirected"));
        let captured = capture_gossip(&rig.star.backend, &Star::addr(1), Duration::from_secs(5));
        for to in [Star::addr(1), Star::addr(2)] {
            let replay = readdress(&captured, victim_addr, 40_000, to.parse().unwrap());
            rig.star.backend.enter(|| {
                for _ in 0..3 {
                    send_raw_v4(to.parse().unwrap(), &replay);
                }
            });
        }
        let mut answered = 0;
        let quiet = Instant::now() + Duration::from_secs(3);
        let mut buf = [0u8; 2048];
        while Instant::now() < quiet {
            if victim.recv(&mut buf).is_ok() {
                answered += 1;
            }
        }
        let replayed = datagrams(&apis[1], "replayed") - replayed_before;
        let misdirected = datagrams(&apis[2], "misdirected") - misdirected_before;
        eprintln!(
            "replays: {replayed} refused at their node, {misdirected} at another; {answered} answers to the victim"
        );
        assert_eq!(answered, 0, "the victim received answers to replays");
        assert!(
            replayed >= 3,
            "the replays to their own node were refused as such: {replayed}"
        );
        assert!(
            misdirected >= 3,
            "the replays to another node were refused as such: {misdirected}"
        );

        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
    });

    let f = findings.into_inner().unwrap();
    let worst = f.missing.iter().max_by_key(|(_, d)| **d);
    eprintln!(
        "{} samples over {:?}; wrong statuses {}; votes of settled members seen missing {} times \
         (observer, voter, target), the longest {:?}",
        f.samples,
        started.elapsed(),
        f.wrong_status.len(),
        f.missing.len(),
        worst
    );
    assert!(
        f.wrong_status.is_empty(),
        "statuses off the truth: {:?}",
        f.wrong_status
    );
    if let Some((key, longest)) = worst {
        assert!(
            *longest <= MAX_MISSING,
            "a live node's vote was missing for {longest:?}: {key:?}"
        );
    }
    // No endpoint of the shared profile changed on the nodes in this process (each node's own
    // events; the extra profile's endpoints come and go with the reloads).
    for (i, n) in nodes.iter().enumerate() {
        if let Node::Here(d) = n {
            let changes: Vec<_> = d
                .events()
                .into_iter()
                .skip(events_before[i])
                .filter(|e| e.profile == "web")
                .collect();
            assert!(changes.is_empty(), "n{i}: {changes:#?}");
        }
    }
    for n in nodes {
        if let Node::Here(d) = n {
            d.stop();
        }
    }
}
