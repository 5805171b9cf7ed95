//! Replies and timeouts: outcomes read from the ring buffer, and probes whose deadline
//! passed claimed back from the kernel, racing the reply that may still come.
use std::time::{Duration, Instant};

use probe_common::l4::{EventKind, STAGE_REQUEST_SENT};

use super::EngineState;
use crate::engine::L4Outcome;

/// BPF_FIB_LKUP_RET_FWD_DISABLED, as the generator reports it in a NoRoute event.
const FIB_FWD_DISABLED: u8 = 5;
/// How long to wait for the event of a probe whose entry the kernel already took.
const CLAIM_GRACE: Duration = Duration::from_millis(200);

impl EngineState {
    pub(super) fn read_events(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.kernel.drain_events(&mut events);
        for ev in events.drain(..) {
            let Some(live) = self.slots.get(ev.slot as usize).and_then(|l| l.as_ref()) else {
                continue;
            };
            if live.gen != ev.gen {
                continue;
            }
            let outcome = match EventKind::from_u8(ev.kind) {
                Some(EventKind::Open) => L4Outcome::Open,
                Some(EventKind::Refused) => L4Outcome::Refused,
                Some(EventKind::Unreachable) => L4Outcome::Unreachable {
                    icmp_type: ev.icmp_type,
                    code: ev.icmp_code,
                },
                Some(kind @ (EventKind::NoNeighbour | EventKind::NoRoute)) => {
                    // The generator hands a probe back when the next hop has no resolved neighbour
                    // (the stack resolves it while sending; later probes take the XDP path
                    // again) or when bpf_fib_lookup refuses because forwarding is off for the
                    // family. Any other lookup failure means there is no route.
                    if kind == EventKind::NoNeighbour || ev.icmp_code == FIB_FWD_DISABLED {
                        self.stats.stack_fallbacks += 1;
                        let job = super::send::job_of(live.flow, ev.slot, ev.gen, live.req, live.tunnel);
                        self.send_raw(&job);
                        continue;
                    }
                    if ev.icmp_code == probe_common::l4::FIB_NOT_A_PROBE_IFACE {
                        if !self.warned_iface {
                            self.warned_iface = true;
                            log::warn!(
                                "the route to {} leaves by an interface probe_rx is not attached to; \
                                 list every interface probes leave by in [source].interfaces \
                                 (such targets are reported as no route)",
                                live.target
                            );
                        }
                    } else {
                        log::debug!(
                            "no route for slot {} (bpf_fib_lookup returned {})",
                            ev.slot,
                            ev.icmp_code
                        );
                    }
                    self.fail_now(ev.slot, L4Outcome::NoRoute);
                    continue;
                }
                Some(EventKind::HttpStatus) => L4Outcome::HttpStatus { status: ev.status },
                Some(EventKind::HttpReset) => L4Outcome::HttpReset,
                Some(EventKind::HttpClosed) => L4Outcome::HttpClosed,
                Some(EventKind::HttpMalformed) => L4Outcome::HttpMalformed,
                Some(EventKind::HttpNoRoom) => L4Outcome::HttpUnsupported,
                Some(EventKind::HttpUndecided) => match probe_common::l4::Undecided::from_u16(ev.status) {
                    Some(why) => L4Outcome::HttpUndecided { why },
                    None => L4Outcome::HttpUnsupported,
                },
                None => continue,
            };
            self.finish(ev.slot, outcome, Duration::from_nanos(ev.rtt_ns));
        }
        self.events = events;
    }

    pub(super) fn expire(&mut self, now: Instant) {
        // A fresh list per turn: one allocation a turn is nothing beside the probes in it, and
        // a kept buffer would hold on to the first round's burst.
        let mut due = Vec::new();
        self.deadlines.take_due(now, &mut due);
        for (_, slot, gen) in due {
            let Some(live) = self.slots.get_mut(slot as usize).and_then(|l| l.as_mut()) else {
                continue;
            };
            if live.gen != gen {
                continue;
            }
            if live.claimed {
                // The kernel took it but its event never came: the ring buffer was full when
                // the reply arrived (probe_rx counts ringbuf_full). What the reply said is
                // unknown, so this is no verdict, neither a timeout nor silence.
                self.stats.lost += 1;
                let elapsed = now - live.sent;
                self.finish(slot, L4Outcome::LocalError { errno: libc::ENOBUFS }, elapsed);
                continue;
            }
            let flow = live.flow;
            let udp = live.udp;
            let http = live.req != 0;
            let elapsed = now - live.sent;
            let claimed = if http {
                // Which phase it timed out in: the stage probe_rx left in the entry.
                self.kernel.claim_stage(&flow).map(|stage| {
                    if stage == STAGE_REQUEST_SENT {
                        L4Outcome::HttpResponseTimeout
                    } else {
                        L4Outcome::Timeout
                    }
                })
            } else if self.kernel.claim(&flow) {
                Some(if udp { L4Outcome::Silent } else { L4Outcome::Timeout })
            } else {
                None
            };
            // A probe sent before a device was found to have lost XDP transmit may have been
            // dropped on its way out, or its RST: its silence says nothing of the target.
            let claimed = match (claimed, self.xdp_tx_lost_at) {
                (Some(_), Some(at)) if live.sent <= at => Some(L4Outcome::LocalError { errno: libc::ENETDOWN }),
                (claimed, _) => claimed,
            };
            if let Some(outcome) = claimed {
                self.finish(slot, outcome, elapsed);
            } else {
                // A reply won the race: its event is in the ring buffer or about to be.
                live.claimed = true;
                self.deadlines.push(now, CLAIM_GRACE, slot, gen);
                self.read_events();
            }
        }
    }
}
