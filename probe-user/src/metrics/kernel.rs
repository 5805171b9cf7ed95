//! The kernel engine's counters in exposition format, read from a snapshot of a running
//! engine. Called off the runner's thread: a snapshot waits for the engine thread.
use super::{catalog, Registry};
use crate::engine::{L4Engine, TxPath};

pub fn render(engine: &L4Engine) -> String {
    let mut m = Registry::new();
    let path = engine.tx_path();
    for (p, name) in [(TxPath::Xdp, "xdp"), (TxPath::Raw, "raw")] {
        m.set(
            &catalog::TX_PATH,
            vec![("path", name.into())],
            if p == path { 1.0 } else { 0.0 },
        );
    }
    let s = match engine.snapshot() {
        Ok(s) => s,
        Err(e) => {
            log::warn!("engine snapshot failed: {e}");
            return m.render();
        }
    };
    let rx = [
        ("matched_open", s.rx.matched_open),
        ("matched_refused", s.rx.matched_refused),
        ("matched_unreach", s.rx.matched_unreach),
        ("forged", s.rx.forged),
        ("stale", s.rx.stale),
        ("rst_sent", s.rx.rst_sent),
        ("ringbuf_full", s.rx.ringbuf_full),
        ("passed_other", s.rx.other),
        ("http_requests", s.rx.http_requests),
        ("matched_http", s.rx.matched_http),
        ("http_no_room", s.rx.http_no_room),
        ("late_reset", s.rx.late_reset),
        ("http_undecided", s.rx.http_undecided),
        ("udp_reply", s.rx.udp_reply),
        ("tunnel_sent", s.rx.tunnel_sent),
        ("no_road", s.rx.no_road),
    ];
    let tx = [
        ("sent", s.tx.sent),
        ("no_route", s.tx.no_route),
        ("no_neigh", s.tx.no_neigh),
        ("inflight_full", s.tx.inflight_full),
        ("ringbuf_full", s.tx.ringbuf_full),
        ("roads_full", s.tx.roads_full),
    ];
    for (metric, events) in [(&catalog::KERNEL_RX, &rx[..]), (&catalog::KERNEL_TX, &tx[..])] {
        for (event, v) in events {
            m.set_total(metric, vec![("event", (*event).into())], *v);
        }
    }
    m.set_total(&catalog::ENGINE_STACK_FALLBACKS, vec![], s.engine.stack_fallbacks);
    m.set(&catalog::ENGINE_INFLIGHT, vec![], s.inflight as f64);
    m.set(&catalog::ENGINE_BACKLOG, vec![], s.engine.backlog as f64);
    m.set(&catalog::ENGINE_HTTP_TEMPLATES, vec![], s.engine.http_templates as f64);
    m.render()
}
