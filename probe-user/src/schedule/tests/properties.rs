//! Property test: random registrations, removals and time steps never double-book a check.
use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add(u32, &'static str),
    Remove(u32, &'static str),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let owner = prop_oneof![Just("a"), Just("b")];
    prop_oneof![
        (0u32..12, owner.clone()).prop_map(|(k, o)| Op::Add(k, o)),
        (0u32..12, owner).prop_map(|(k, o)| Op::Remove(k, o)),
        (0u64..400).prop_map(|ms| Op::Advance(ms * MS)),
    ]
}

/// What the test knows about one check.
#[derive(Default)]
struct Seen {
    finishing_at: Option<u64>,
    last_finished: Option<u64>,
}

proptest! {
    /// Whatever the sequence of registrations, removals and time steps: a check is handed
    /// out only when live and idle, and never sooner than one interval after its previous
    /// probe finished.
    #[test]
    fn scheduler_never_double_books(ops in proptest::collection::vec(op(), 0..150)) {
        let interval = 100 * MS;
        let mut sched = sched();
        let mut seen: HashMap<CheckId, Seen> = HashMap::new();
        let mut now = 0u64;
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Add(key, owner) => {
                    let id = sched.add(owner, key, CheckParams::new(ms(100)), now).unwrap();
                    seen.entry(id).or_default();
                }
                Op::Remove(key, owner) => {
                    if let Some(id) = sched.lookup(&key) {
                        let owned = sched.owners(id).contains(&owner);
                        prop_assert_eq!(sched.remove(&owner, id).is_ok(), owned);
                        if sched.key(id).is_none() {
                            seen.remove(&id);
                        }
                    }
                }
                Op::Advance(by) => {
                    let until = now + by;
                    // Walk through every due time and completion up to `until`, in order.
                    loop {
                        let finish = seen.values().filter_map(|s| s.finishing_at).min().unwrap_or(u64::MAX);
                        let step = sched.next_due().unwrap_or(u64::MAX).min(finish);
                        if step > until {
                            break;
                        }
                        now = now.max(step);
                        for (&id, s) in &mut seen {
                            if s.finishing_at.is_some_and(|t| t <= now) {
                                s.finishing_at = None;
                                s.last_finished = Some(now);
                                let next = sched.completed(id, now, Cadence::Steady).unwrap();
                                prop_assert_eq!(next, now + interval);
                            }
                        }
                        out.clear();
                        sched.pop_due(now, &mut out);
                        for id in &out {
                            let s = seen.get_mut(id).expect("only live checks are handed out");
                            prop_assert!(s.finishing_at.is_none(), "{} handed out while in flight", id);
                            if let Some(last) = s.last_finished {
                                prop_assert!(now >= last + interval, "{} probed too soon", id);
                            }
                            s.finishing_at = Some(now + 30 * MS);
                        }
                    }
                    now = until;
                }
            }
        }
    }
}
