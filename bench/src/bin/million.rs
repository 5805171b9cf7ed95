//! `cargo xtask bench million`: one probed (the release binary, `probed run`) holding 250k, 500k
//! and 1M TCP targets at a 2 s interval against the XDP reflector, for `--seconds` (30) after
//! the first rounds.
//!
//! The fleet: every address of 198.19.0.0/16 on 16 ports (80-95), 1,048,576 distinct ip:port
//! targets, routed from the prober to the backend namespace, where `test_reflector` answers each
//! SYN with a SYN+ACK in XDP (the backend's own TCP stack never sees them). The config groups
//! them as a load balancer node would: one profile per port and /22 (1,024 endpoints each).
//!
//! Per fleet: how long the config takes to load (spawn to the API answering) and to reach every
//! target once (probes sent >= targets); then over the measured window, probes/s sent, results
//! other than open, lateness p50/p99 from the daemon's histogram, CPU per probe of the process
//! and of the machine's softirq time (where the XDP and veth work lands), peak RSS (VmHWM), RSS
//! at the window's end, and the kernel memory of the process's BPF maps (memlock in fdinfo), each per target. Last, a
//! reload with 1% of the endpoints moved: time for `POST /v1/reload` to answer, the lateness p99
//! of the probes from its start to one interval after it (how long probing stood still), and whether the
//! other endpoints kept their state; then how long the daemon takes to stop on SIGTERM. With
//! `--reloads N` (N > 1), N - 1 more reloads follow, alternating the two configs, and the RSS
//! after them is printed beside the RSS after the window: whether memory grows with reloads.
//!
//! Then 1,000 endpoint changes made both ways, side by side on the same daemon (issue 45): by
//! the fleet API (a batch of 1,000 puts to a profile with `endpoints_from = "api"`, then one
//! moving all of them to another port) and by a reload of the file with 1,000 of its endpoints
//! moved; for each, the time to answer and the lateness p99 of the probes from its start to one
//! interval after it, and the ratio.
//!
//! `PROBED_BIN` measures another build (before/after a change).
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use probed::api::client;
use probed_tests::{
    daemon::{histogram_quantile_between, DaemonFiles},
    probed_bin,
    procs::{parse_sizes, proc_cpu, softirq_cpu, status_kb, Proc},
    reflector::Reflector,
    topo::{BACKEND_IF, PROBER_IF},
    Topology,
};

const LATENESS: &str = "probed_schedule_lateness_seconds";
/// Endpoints per profile: one /22 of addresses on one port.
const PER_PROFILE: usize = 1024;
/// The fleet's ports: 65,536 addresses on each.
const PORTS: usize = 16;
const FIRST_PORT: usize = 80;
/// Limits on each wait, so that a daemon that cannot cope ends the bench instead of hanging it.
const START_LIMIT: Duration = Duration::from_secs(120);

struct Args {
    sizes: Vec<usize>,
    seconds: u64,
    interval_s: u64,
    /// Record each measured window with `perf record -g` into this directory.
    perf: Option<PathBuf>,
    /// Save the scrape at the end of each measured window into this directory.
    metrics: Option<PathBuf>,
    /// Reloads after the window (the first is measured; the others show memory over reloads).
    reloads: usize,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![250_000, 500_000, 1_000_000],
        seconds: 30,
        interval_s: 2,
        perf: None,
        metrics: None,
        reloads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--sizes" => a.sizes = parse_sizes(&value),
            "--seconds" => a.seconds = value.parse().expect("--seconds: whole seconds"),
            "--interval" => a.interval_s = value.parse().expect("--interval: whole seconds"),
            "--perf" => a.perf = Some(PathBuf::from(value)),
            "--metrics" => a.metrics = Some(PathBuf::from(value)),
            "--reloads" => a.reloads = value.parse().expect("--reloads: a count"),
            other => panic!(
                "unknown flag {other}: --sizes N,N --seconds S --interval S --perf DIR --metrics DIR --reloads N"
            ),
        }
    }
    for &n in &a.sizes {
        assert!(n <= PORTS * 65_536, "at most {} targets", PORTS * 65_536);
    }
    a
}

/// Target `i`: an address of 198.19.0.0/16 and a port; profile `i / PER_PROFILE` holds one /22
/// of addresses on one port.
fn target(i: usize) -> (String, usize) {
    let (port_index, addr) = (i / 65_536, i % 65_536);
    (format!("198.19.{}.{}", addr / 256, addr % 256), FIRST_PORT + port_index)
}

/// The fleet API's changes measured beside a reload's.
const FLEET_CHANGES: usize = 1000;

/// The config for `n` targets; with `moved`, every `moved`th endpoint (from the first) points
/// at another port of its address, as a reload that changes that share of them. Last, the
/// profile "fleet", whose endpoints the API owns (none at the start).
fn config(files: &DaemonFiles, n: usize, interval_s: u64, moved: Option<usize>) -> String {
    let mut c = files.header(PROBER_IF);
    c.reserve(n * 64);
    for i in 0..n {
        if i % PER_PROFILE == 0 {
            let _ = write!(
                c,
                "\n[[profile]]\nname = \"svc{}\"\ndialect = \"lb\"\nrouting = \"weighted\"\n\n[profile.health]\n\
                 protocol = \"tcp\"\ninterval = \"{interval_s}s\"\ntimeout = \"1s\"\n\
                 healthy_threshold = 2\nunhealthy_threshold = 2\n",
                i / PER_PROFILE
            );
        }
        let (addr, mut port) = target(i);
        if moved.is_some_and(|every| i % every == 0) {
            port += 1000;
        }
        let _ = write!(
            c,
            "[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"{addr}\"\nport = {port}\n"
        );
    }
    let _ = write!(
        c,
        "\n[[profile]]\nname = \"fleet\"\ndialect = \"lb\"\nrouting = \"weighted\"\nendpoints_from = \"api\"\n\n\
         [profile.health]\nprotocol = \"tcp\"\ninterval = \"{interval_s}s\"\ntimeout = \"1s\"\n\
         healthy_threshold = 2\nunhealthy_threshold = 2\n"
    );
    c
}

/// A batch of `FLEET_CHANGES` puts to the profile "fleet", on `port`.
fn fleet_batch(port: u16) -> Vec<u8> {
    let put: Vec<serde_json::Value> = (0..FLEET_CHANGES)
        .map(|i| serde_json::json!({"name": format!("f{i}"), "address": format!("198.19.255.{}", i % 250 + 1), "port": port + (i / 250) as u16}))
        .collect();
    serde_json::json!({ "put": put }).to_string().into_bytes()
}

fn call(api: &str, method: &str, path: &str) -> Result<String, String> {
    call_within(api, method, path, Duration::from_secs(10))
}

fn call_within(api: &str, method: &str, path: &str, within: Duration) -> Result<String, String> {
    let r = client::Client::new(api)
        .with_timeouts(Duration::from_secs(2), within)
        .request(method, path)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    if r.status == 200 {
        Ok(r.body)
    } else {
        Err(format!("{method} {path}: {} {}", r.status, r.body))
    }
}

/// The sum of every series of `name` (all profiles).
fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn not_open(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("probed_probe_results_total{") && !l.contains("outcome=\"open\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Kernel memory of the BPF maps the process holds open (each map once), in bytes.
fn map_memory(pid: u32) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut sum = 0;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    for fd in fds.flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        let field = |k: &str| info.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
        if let (Some(id), Some(mem)) = (field("map_id:"), field("memlock:")) {
            if seen.insert(id) {
                sum += mem;
            }
        }
    }
    sum
}

fn wait_until(limit: Duration, what: &str, proc: &mut Proc, mut done: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !done() {
        assert!(proc.alive(), "probed exited while {what}: {}", proc.output());
        assert!(t.elapsed() < limit, "probed took over {limit:?} {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
    t.elapsed()
}

struct Row {
    n: usize,
    load_s: f64,
    first_round_s: f64,
    probes_per_s: f64,
    not_open: f64,
    p50_ms: f64,
    p99_ms: f64,
    proc_ns: f64,
    softirq_ns: f64,
    /// VmHWM before the reload, and after it; VmRSS at the end of the measured window.
    steady_hwm_kb: u64,
    rss_kb: u64,
    hwm_kb: u64,
    maps_bytes: u64,
    reload_s: f64,
    /// Lateness p99 of the probes from the reload's start to one interval after its end.
    reload_p99_ms: f64,
    reload_kept: bool,
    /// From SIGTERM to exit.
    stop_s: f64,
    fleet: FleetRow,
}

/// 1,000 changes by the fleet API and by a reload: (seconds to answer, lateness p99 in ms,
/// the runner's milliseconds on a batch as it says).
type Timed = (f64, f64, Option<f64>);

struct FleetRow {
    api_add: Timed,
    api_move: Timed,
    by_reload: Timed,
    /// The file endpoints the reload moved (about 1,000).
    reload_changes: usize,
}

fn measure(n: usize, a: &Args, bin: &Path) -> Row {
    let topo = Topology::new();
    topo.anyip("198.19.0.0/16");
    let _reflector = Reflector::attach(&topo.backend, BACKEND_IF);
    let files = DaemonFiles::new();
    let path = files.config_path();
    std::fs::write(&path, config(&files, n, a.interval_s, None)).unwrap();
    let api = files.api();
    let log = files.dir.join("probed.log");
    let mut proc = Proc::spawn(
        &topo.prober,
        None,
        &[bin.to_str().unwrap(), "run", "--config", path.to_str().unwrap()],
        &log,
        "probed",
    );
    let load = wait_until(START_LIMIT, "loading its config", &mut proc, || {
        call(&api, "GET", "/v1/status/svc0/e0").is_ok()
    });
    // An overloaded daemon answers late: a minute for each scrape before the bench gives up.
    let metrics = || call_within(&api, "GET", "/metrics", Duration::from_secs(60)).expect("scrape /metrics");
    let sent = |m: &str| total(m, "probed_probes_sent_total");
    let first_round = load
        + wait_until(START_LIMIT, "probing every target once", &mut proc, || {
            sent(&metrics()) >= n as f64
        });
    // Every endpoint's first transitions (and their events and state-file writes) come in the
    // first rounds; the window starts after them.
    std::thread::sleep(Duration::from_secs(3 * a.interval_s + 2));
    let (m0, c0, s0, t0) = (metrics(), proc_cpu(proc.pid()), softirq_cpu(), Instant::now());
    let perf = a.perf.as_ref().map(|dir| {
        std::fs::create_dir_all(dir).unwrap();
        Command::new("perf")
            .args(["record", "-g", "-q", "-o"])
            .arg(dir.join(format!("probed-{n}.data")))
            .args(["-p", &proc.pid().to_string(), "--", "sleep", &a.seconds.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn perf record")
    });
    std::thread::sleep(Duration::from_secs(a.seconds));
    if let Some(mut p) = perf {
        let _ = p.wait();
    }
    let steady_hwm_kb = status_kb(proc.pid(), "VmHWM:");
    let rss_kb = status_kb(proc.pid(), "VmRSS:");
    let (m1, c1, s1) = (metrics(), proc_cpu(proc.pid()), softirq_cpu());
    let wall = t0.elapsed().as_secs_f64();
    if let Some(dir) = &a.metrics {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(format!("metrics-{n}.txt")), &m1).unwrap();
    }
    assert!(proc.alive(), "probed exited while measured: {}", proc.output());
    let probes = (sent(&m1) - sent(&m0)).max(1.0);
    let maps_bytes = map_memory(proc.pid());
    // A reload with 1% of the endpoints moved: the others must keep their state (online).
    std::fs::write(&path, config(&files, n, a.interval_s, Some(100))).unwrap();
    let m_reload = metrics();
    let t = Instant::now();
    let reloaded = call_within(&api, "POST", "/v1/reload", START_LIMIT);
    let reload_s = t.elapsed().as_secs_f64();
    if let Err(e) = &reloaded {
        eprintln!("  reload failed: {e}");
    }
    // The probes due while the runner applied it, and one interval after: how late they left.
    std::thread::sleep(Duration::from_secs(a.interval_s));
    let reload_p99_ms = histogram_quantile_between(&m_reload, &metrics(), LATENESS, 0.99) * 1e3;
    let kept = reloaded.is_ok() && call(&api, "GET", "/v1/status/svc0/e1").is_ok_and(|b| b.contains("\"Online\""));
    let hwm_kb = status_kb(proc.pid(), "VmHWM:");
    // 1,000 changes by the API (added, then all moved), and by a reload moving 1,000 of the
    // file's endpoints: each timed to its answer, with the lateness p99 from its start to one
    // interval after.
    let timed = |what: &str, f: &dyn Fn() -> Result<String, String>| {
        let before = metrics();
        let t = Instant::now();
        let runner_ms = match f() {
            Ok(body) => serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["runner_us"].as_f64())
                .map(|us| us / 1e3),
            Err(e) => {
                eprintln!("  {what} failed: {e}");
                None
            }
        };
        let took = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_secs(a.interval_s));
        let p99 = histogram_quantile_between(&before, &metrics(), LATENESS, 0.99) * 1e3;
        (took, p99, runner_ms)
    };
    let post = |body: Vec<u8>| {
        let r = client::Client::new(&api)
            .with_timeouts(Duration::from_secs(2), START_LIMIT)
            .request_with("POST", "/v1/profiles/fleet/endpoints", &body)
            .map_err(|e| e.to_string())?;
        if r.status == 200 {
            Ok(r.body)
        } else {
            Err(format!("{} {}", r.status, r.body))
        }
    };
    let api_add = timed("the fleet API's adds", &|| post(fleet_batch(200)));
    let api_move = timed("the fleet API's moves", &|| post(fleet_batch(210)));
    let every = (n / FLEET_CHANGES).max(1);
    std::fs::write(&path, config(&files, n, a.interval_s, Some(every))).unwrap();
    let by_reload = timed("the reload of 1,000", &|| {
        call_within(&api, "POST", "/v1/reload", START_LIMIT)
    });
    let fleet = FleetRow {
        api_add,
        api_move,
        by_reload,
        reload_changes: n.div_ceil(every),
    };
    if a.reloads > 1 {
        more_reloads(&files, n, a, &api, &mut proc, rss_kb);
    }
    let stop_s = proc.terminate(START_LIMIT).map_or(f64::INFINITY, |t| t.as_secs_f64());
    Row {
        n,
        load_s: load.as_secs_f64(),
        first_round_s: first_round.as_secs_f64(),
        probes_per_s: probes / wall,
        not_open: not_open(&m1) - not_open(&m0),
        p50_ms: histogram_quantile_between(&m0, &m1, LATENESS, 0.5) * 1e3,
        p99_ms: histogram_quantile_between(&m0, &m1, LATENESS, 0.99) * 1e3,
        proc_ns: (c1 - c0).as_secs_f64() * 1e9 / probes,
        softirq_ns: (s1 - s0).as_secs_f64() * 1e9 / probes,
        steady_hwm_kb,
        rss_kb,
        hwm_kb,
        maps_bytes,
        reload_s,
        reload_p99_ms,
        reload_kept: kept,
        stop_s,
        fleet,
    }
}

/// Reloads 2..=`a.reloads`, alternating the config without and with the moved endpoints, each
/// followed by one interval, then prints the RSS beside `rss_kb` (the window's end).
fn more_reloads(files: &DaemonFiles, n: usize, a: &Args, api: &str, proc: &mut Proc, rss_kb: u64) {
    let path = files.config_path();
    let mut after_each = Vec::new();
    for r in 2..=a.reloads {
        std::fs::write(&path, config(files, n, a.interval_s, (r % 2 == 1).then_some(100))).unwrap();
        if let Err(e) = call_within(api, "POST", "/v1/reload", START_LIMIT) {
            eprintln!("  reload {r} failed: {e}");
            return;
        }
        assert!(proc.alive(), "probed exited after reload {r}: {}", proc.output());
        std::thread::sleep(Duration::from_secs(a.interval_s));
        after_each.push((status_kb(proc.pid(), "VmRSS:") / 1024).to_string());
    }
    // The runner hands freed pages back once a second: the RSS after that.
    std::thread::sleep(Duration::from_secs(2));
    let after = status_kb(proc.pid(), "VmRSS:");
    eprintln!(
        "  {n} targets: RSS {} MiB at the window's end, {} MiB after {} reloads (one interval after reloads 2..: {} MiB)",
        rss_kb / 1024,
        after / 1024,
        a.reloads,
        after_each.join(", ")
    );
}

fn print_row(r: &Row) {
    println!(
        "| {} | {:.1} s | {:.1} s | {:.0} | {:.0} | <= {} ms | <= {} ms | {:.2} µs | {:.2} µs | {} MiB | {:.0} B | {} MiB | {} MiB | {} MiB | {:.0} B | {:.1} s | <= {} ms | {} | {:.1} s |",
        r.n,
        r.load_s,
        r.first_round_s,
        r.probes_per_s,
        r.not_open,
        r.p50_ms,
        r.p99_ms,
        r.proc_ns / 1e3,
        r.softirq_ns / 1e3,
        r.steady_hwm_kb / 1024,
        r.steady_hwm_kb as f64 * 1024.0 / r.n as f64,
        r.rss_kb / 1024,
        r.hwm_kb / 1024,
        r.maps_bytes >> 20,
        r.maps_bytes as f64 / r.n as f64,
        r.reload_s,
        r.reload_p99_ms,
        if r.reload_kept { "yes" } else { "no" },
        r.stop_s,
    );
}

fn main() {
    let a = args();
    let bin: PathBuf = std::env::var_os("PROBED_BIN").map_or_else(probed_bin, PathBuf::from);
    eprintln!(
        "probed {} against the XDP reflector: {} s measured per fleet, interval {} s",
        bin.display(),
        a.seconds,
        a.interval_s
    );
    println!(
        "| targets | config loaded | every target probed | probes/s | not open | lateness p50 | p99 | \
         CPU/probe process | softirq/probe | peak RSS | RSS/target | RSS after the window | peak RSS with the reload | BPF maps | maps/target | reload 1% | lateness p99 around it | others kept | stop |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|");
    // Each row as soon as it is measured: a larger fleet that fails does not take the others.
    let mut fleet = Vec::new();
    for &n in &a.sizes {
        eprintln!("{n} targets ...");
        let row = measure(n, &a, &bin);
        print_row(&row);
        fleet.push((n, row.fleet));
    }
    println!();
    println!(
        "| targets | {FLEET_CHANGES} added by API: answer | runner | lateness p99 | {FLEET_CHANGES} moved by API: answer | runner | \
         lateness p99 | ~{FLEET_CHANGES} moved by reload: answer | lateness p99 | reload / API (answer) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let ms = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |ms| format!("{ms:.1} ms"));
    for (n, f) in fleet {
        println!(
            "| {n} | {:.3} s | {} | <= {} ms | {:.3} s | {} | <= {} ms | {:.2} s ({} endpoints) | <= {} ms | {:.0}x |",
            f.api_add.0,
            ms(f.api_add.2),
            f.api_add.1,
            f.api_move.0,
            ms(f.api_move.2),
            f.api_move.1,
            f.by_reload.0,
            f.reload_changes,
            f.by_reload.1,
            f.by_reload.0 / f.api_move.0.max(1e-6),
        );
    }
}
