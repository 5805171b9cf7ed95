//! A configuration resolved against the running table, and swapped into it.
//!
//! A reload usually changes a few endpoints of a large fleet. `plan` builds only the targets
//! that are new or changed (an endpoint that stays, in a profile whose settings stay, is left
//! untouched where it is), so that a million-endpoint reload costs the parse plus a compare per
//! endpoint instead of a second table. Nothing is changed until `Table::swap_in`, which cannot
//! fail: a plan that does not resolve leaves the running table as it was.
use std::{collections::HashMap, sync::Arc};

use super::{verdict_key, Brief, BuildError, NestedTarget, OwnerId, ProfileEntry, Table, Target};
use crate::{
    config::{Config, Endpoint, Profile},
    daemon::{
        checks::{CheckKey, CheckSpec, Specs, Subject},
        state::Saved,
    },
    health::{ProbeTiming, Rules, Tracker},
    status::{EndpointStatus, Health, ProfileStatus, StatusCounts},
};

/// What a configuration changes in the running table.
pub(crate) struct Plan {
    pub(super) profiles: Vec<Planned>,
    /// Per profile of the running table, by position in its `owners`: the targets that stay
    /// untouched. Empty when none does.
    pub(super) stay: Vec<Vec<bool>>,
    /// Endpoints that keep their state (untouched, or rebuilt on the same check), endpoints
    /// that start afresh (or from the state file), and running endpoints that go.
    pub kept: usize,
    pub added: usize,
    pub removed: usize,
}

/// One profile of the new configuration.
pub(super) struct Planned {
    /// Its entry, `owners` in config order (ids that stay and ids built); its aggregate state
    /// is carried from the running entry when it swaps in.
    pub(super) entry: ProfileEntry,
    /// Its index in the running table, if it was there.
    pub(super) old: Option<usize>,
    /// Its targets built anew, in config order.
    pub(super) built: Vec<(OwnerId, Box<Target>)>,
    /// Whether any of its targets is built or gone: its counts and status must be redone.
    pub(super) dirty: bool,
}

impl Plan {
    /// The targets built anew, each with its profile's settings.
    pub(crate) fn built_mut(&mut self) -> impl Iterator<Item = (&Profile, &mut Target)> {
        self.profiles
            .iter_mut()
            .flat_map(|p| p.built.iter_mut().map(|(_, t)| (&p.entry.cfg, &mut **t)))
    }

    pub(crate) fn built(&self) -> impl Iterator<Item = &Target> + Clone {
        self.profiles.iter().flat_map(|p| p.built.iter().map(|(_, t)| &**t))
    }
}

/// A running target a swap took out, with the name of the profile it was in (its
/// `profile_ix` is the running table's, gone with it).
pub(crate) type Gone = (OwnerId, Arc<str>, Box<Target>);

/// What `Table::swap_in` took out and put in.
pub(crate) struct Swapped {
    /// Running targets that went: removed, or replaced by one built anew (with the same id when
    /// it kept its state, its check moved over to it).
    pub gone: Vec<Gone>,
    /// The targets built anew, and for one that replaced a target with its id, whether that
    /// one was probed.
    pub built: Vec<(OwnerId, Option<bool>)>,
    /// Per profile: its counts and status were redone.
    pub dirty: Vec<bool>,
}

/// What a built endpoint starts with: carried over from its running self, resumed from the
/// state file, or fresh.
struct Start {
    id: OwnerId,
    tracker: Tracker,
    last: Option<crate::daemon::views::LastResult>,
    last_rtt: super::Rtt,
    last_change: Option<crate::daemon::views::LastChange>,
    admin_override: Option<crate::status::AdminState>,
    kept: bool,
    /// Its slow start: carried over from its running self, else none (`Target::ramp`,
    /// `Target::quiet_start`).
    ramp: u16,
    quiet_start: bool,
    /// What its agent held, carried over from its running self (`Target::agent`).
    agent: crate::probe::agent::AgentState,
}

/// Resolves `config` against the running table `old`, which `running` produced (its profiles
/// and their endpoints line up with the table's: profile by profile, owner by owner). An
/// endpoint equal to its running self in a profile whose settings are the same stays
/// untouched. Any other that stays (same profile and name, a check of the same protocol,
/// address and port) is rebuilt and keeps its id, health and history (`Keep`); a new one
/// resumes from `saved` when the saved check looked at the same, else starts in
/// CheckingEndpoint. A profile keeps the API's enable/disable unless the file
/// changed its `enabled` itself. New ids come from `next_id`.
pub(crate) fn plan(
    config: &Config,
    running: Option<&Config>,
    old: &Table,
    saved: &Saved,
    next_id: &mut OwnerId,
) -> Result<Plan, BuildError> {
    let mut errors = Vec::new();
    let old_ix: HashMap<&str, usize> = old.profiles.iter().enumerate().map(|(i, p)| (&*p.name, i)).collect();
    let mut plan = Plan {
        profiles: Vec::with_capacity(config.profiles.len()),
        stay: vec![Vec::new(); old.profiles.len()],
        kept: 0,
        added: 0,
        removed: 0,
    };
    for profile in &config.profiles {
        let oix = old_ix.get(profile.name.as_str()).copied();
        let was = oix.map(|i| &old.profiles[i]);
        // The running profile's endpoints, aligned with its entry's owners.
        let was_cfg = oix
            .and_then(|i| running?.profiles.get(i))
            .filter(|r| r.name == profile.name && Some(r.endpoints.len()) == was.map(|p| p.owners.len()));
        debug_assert!(
            was.is_none() || was_cfg.is_some(),
            "the running config made the running table"
        );
        let mut entry = new_entry(config, profile, was, saved);
        let untouched = was.is_some_and(|w| w.cfg == entry.cfg);
        let mut by_name: Option<HashMap<&str, usize>> = None;
        let mut built = Vec::new();
        let mut stayed = 0;
        let mut specs = Specs::new(profile);
        for (i, endpoint) in profile.endpoints.iter().enumerate() {
            // The running endpoint of that name: the same position unless endpoints moved.
            let at = was_cfg.and_then(|r| {
                if r.endpoints.get(i).is_some_and(|e| e.name == endpoint.name) {
                    return Some(i);
                }
                let names =
                    by_name.get_or_insert_with(|| r.endpoints.iter().enumerate().map(|(j, e)| (&*e.name, j)).collect());
                names.get(&*endpoint.name).copied()
            });
            let (Some(j), Some(w), Some(r), Some(oix)) = (at, was, was_cfg, oix) else {
                let target = build_one(&mut specs, endpoint, &entry, plan.profiles.len(), None, saved, next_id);
                push_built(
                    &mut plan,
                    &mut entry,
                    &mut built,
                    joins(target, was.is_some()),
                    &mut errors,
                );
                continue;
            };
            if untouched && r.endpoints[j] == *endpoint {
                let stay = &mut plan.stay[oix];
                if stay.is_empty() {
                    stay.resize(w.owners.len(), false);
                }
                stay[j] = true;
                stayed += 1;
                plan.kept += 1;
                entry.owners.push(w.owners[j]);
                continue;
            }
            let running_target = old.targets.get(&w.owners[j]).map(|t| Running {
                id: w.owners[j],
                target: t,
            });
            let target = build_one(
                &mut specs,
                endpoint,
                &entry,
                plan.profiles.len(),
                running_target,
                saved,
                next_id,
            );
            push_built(&mut plan, &mut entry, &mut built, joins(target, true), &mut errors);
        }
        let dirty = !built.is_empty() || was.is_none_or(|w| stayed != w.owners.len());
        plan.profiles.push(Planned {
            entry,
            old: oix,
            built,
            dirty,
        });
    }
    if !errors.is_empty() {
        return Err(BuildError(errors));
    }
    plan.removed = old.targets.len() - plan.kept;
    Ok(plan)
}

/// A built target that is new (not carried over) to a profile that was running joins its
/// traffic: its first verdict may start a slow start. Every other new one's does not (a
/// profile new to a reload, or the table probed starts with: nothing of it took traffic yet).
pub(super) fn joins(
    target: Result<(OwnerId, bool, Box<Target>), String>,
    profile_ran: bool,
) -> Result<(OwnerId, bool, Box<Target>), String> {
    target.map(|(id, kept, mut t)| {
        if !kept {
            t.flags.set(super::target::Flags::QUIET_START, !profile_ran);
        }
        (id, kept, t)
    })
}

/// Counts a built target into the plan, or its error into `errors` (each message once).
fn push_built(
    plan: &mut Plan,
    entry: &mut ProfileEntry,
    built: &mut Vec<(OwnerId, Box<Target>)>,
    target: Result<(OwnerId, bool, Box<Target>), String>,
    errors: &mut Vec<String>,
) {
    match target {
        Ok((id, kept, t)) => {
            if kept {
                plan.kept += 1;
            } else {
                plan.added += 1;
            }
            entry.owners.push(id);
            built.push((id, t));
        }
        Err(e) => {
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
    }
}

/// A profile's entry for the new table: its settings, its nested endpoints (their last change
/// carried), the API's enable/disable carried unless the file changed `enabled` itself.
fn new_entry(config: &Config, profile: &Profile, was: Option<&ProfileEntry>, saved: &Saved) -> ProfileEntry {
    let enabled_override = match was {
        Some(p) => p.enabled_override.filter(|_| p.cfg.enabled == profile.enabled),
        None => saved
            .profiles
            .get(&profile.name)
            .copied()
            .filter(|&e| e != profile.enabled),
    };
    let nested = profile
        .nested
        .iter()
        .map(|n| {
            // Its running self keeps its status: the entry's counts, carried when the profile
            // is not settled again, include it.
            let running = was.and_then(|w| w.nested.iter().find(|o| o.cfg.name == n.name && o.cfg.child == n.child));
            NestedTarget {
                cfg: n.clone(),
                name: Arc::from(n.name.as_str()),
                child: config
                    .profiles
                    .iter()
                    .position(|p| p.name == n.child)
                    .expect("validated: the child exists"),
                status: running.map_or(EndpointStatus::Inactive, |o| o.status),
                eligible: running.is_some_and(|o| o.eligible),
                last_change: running.and_then(|o| o.last_change.clone()),
            }
        })
        .collect();
    let rules = Rules {
        thresholds: profile.health.thresholds,
        timing: ProbeTiming {
            interval: profile.health.interval,
            timeout: profile.health.timeout,
        },
    };
    ProfileEntry {
        cfg: profile.settings(),
        nested,
        enabled_override,
        name: was.map_or_else(|| Arc::from(profile.name.as_str()), |w| w.name.clone()),
        // The running copy when it is the same, so untouched trackers keep sharing it.
        rules: was
            .map(|w| w.rules.clone())
            .filter(|r| **r == rules)
            .unwrap_or_else(|| Arc::new(rules)),
        owners: Vec::with_capacity(profile.endpoints.len()),
        counts: StatusCounts::default(),
        status: ProfileStatus::Inactive,
        fail_open: false,
        behind: 0,
    }
}

/// An endpoint's running self, and the running configuration's profile and endpoint it was
/// built from.
pub(super) struct Running<'a> {
    pub(super) id: OwnerId,
    pub(super) target: &'a Target,
}

/// What a changed check keeps of its running self (docs/operations/configuration.md, "What a
/// reload keeps").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// The same check: everything, its place in the scheduler too.
    All,
    /// Only the timing or thresholds changed: the health and the results toward a change.
    HealthAndRun,
    /// What the check sends or expects changed: the health, as the new check's starting point.
    Health,
}

impl Running<'_> {
    /// What the new check `spec` keeps: nothing when it looks at something else (another
    /// protocol, address or port).
    fn keeps(&self, spec: &CheckSpec) -> Option<Keep> {
        let was = &self.target.spec;
        if was.key() == spec.key() {
            return Some(Keep::All);
        }
        if was.subject() != spec.subject() {
            return None;
        }
        Some(if was.key().question() == spec.key().question() {
            Keep::HealthAndRun
        } else {
            Keep::Health
        })
    }
}

/// One endpoint's target, built anew: carrying over `running` (its running self, by name) when
/// the check still looks at the same thing (`Running::keeps`).
pub(super) fn build_one(
    specs: &mut Specs<'_>,
    endpoint: &Endpoint,
    entry: &ProfileEntry,
    profile_ix: usize,
    running: Option<Running<'_>>,
    saved: &Saved,
    next_id: &mut OwnerId,
) -> Result<(OwnerId, bool, Box<Target>), String> {
    let profile = specs.profile();
    let resolved = specs.resolve(endpoint).map_err(|e| e.to_string())?;
    let (question_text, spec) = (resolved.question, resolved.spec);
    let check_key = spec.key();
    let kept = running.and_then(|r| r.keeps(&spec).map(|keep| (r, keep)));
    let start = match kept {
        Some((r, keep)) => carry_over(r.id, r.target, endpoint, &entry.rules, keep),
        None => {
            let id = *next_id;
            *next_id += 1;
            resume(id, saved, profile, endpoint, (check_key, spec.subject()), &entry.rules)
        }
    };
    let target = Box::new(Target {
        profile_ix: profile_ix as u32,
        // The new config's copy (a running target of the same name carries over): the old
        // config's goes with it instead of staying behind in the target.
        name: endpoint.name.clone(),
        endpoint: Brief::of(endpoint),
        flags: super::target::Flags::of(entry.enabled(), start.quiet_start, true),
        config_admin: endpoint.state,
        admin_override: start.admin_override,
        spec: Arc::new(spec),
        check: None,
        tracker: start.tracker,
        last: start.last,
        last_rtt: start.last_rtt,
        last_change: start.last_change,
        late_us: 0,
        status: EndpointStatus::Inactive,
        eligible: false,
        ramp: start.ramp,
        verdict_key: verdict_key(&profile.name, &endpoint.name, &question_text),
        cluster_health: None,
        cluster_sent: None,
        // What an agent held goes when the profile no longer asks one.
        agent: if profile.health.agent.is_some() {
            start.agent
        } else {
            crate::probe::agent::AgentState::NONE
        },
    });
    Ok((start.id, start.kept, target))
}

/// An endpoint that stays: its health and history carry over, its pending results as `keep`
/// says. The operator's API override stands unless the file changed that endpoint's admin
/// state itself.
fn carry_over(id: OwnerId, t: &Target, endpoint: &Endpoint, rules: &Arc<Rules>, keep: Keep) -> Start {
    let tracker = if t.tracker.rules() == rules && keep == Keep::All {
        t.tracker.with_rules(rules)
    } else {
        t.tracker.rebase(rules, keep != Keep::Health)
    };
    Start {
        id,
        tracker,
        last: t.last.clone(),
        last_rtt: t.last_rtt,
        last_change: t.last_change.clone(),
        admin_override: t.admin_override.filter(|_| t.config_admin == endpoint.state),
        kept: true,
        ramp: t.ramp,
        quiet_start: t.quiet_start(),
        agent: t.agent,
    }
}

/// A new endpoint: its saved state when the state file has a check of it that looks at the
/// same thing (the same subject; or, in files written before subjects were saved, the very
/// same check, by this release or by one before the key text's version `k2`, whose text is
/// built only for a saved target the current key does not match).
fn resume(
    id: OwnerId,
    saved: &Saved,
    profile: &Profile,
    endpoint: &Endpoint,
    (check_key, subject): (CheckKey, Subject),
    rules: &Arc<Rules>,
) -> Start {
    let saved = saved
        .target(&profile.name, &endpoint.name)
        .filter(|s| match &s.subject {
            Some(saved) => *saved == subject.fingerprint(),
            None => s.check == check_key.fingerprint() || s.check == CheckSpec::legacy_fingerprint(profile, endpoint),
        });
    Start {
        id,
        tracker: Tracker::resume(rules, saved.map_or(Health::CheckingEndpoint, |s| s.health)),
        last: None,
        last_rtt: super::Rtt::default(),
        last_change: saved.and_then(|s| s.last_change.clone()),
        admin_override: saved.and_then(|s| s.admin_override),
        kept: false,
        ramp: crate::status::ramp::FULL,
        quiet_start: true,
        agent: crate::probe::agent::AgentState::NONE,
    }
}

impl Table {
    /// Puts `plan` in place of what it replaces: running targets that neither stay nor carry
    /// over are taken out (returned), the built ones go in (a replaced target's check moves to
    /// its successor with the same id) and profiles take their new order, their aggregate state
    /// carried. The caller settles the profiles `dirty` says once the checks are registered.
    pub(crate) fn swap_in(&mut self, plan: Plan) -> Swapped {
        let old_profiles = std::mem::take(&mut self.profiles);
        let mut gone = Vec::new();
        for (p, stay) in old_profiles.iter().zip(&plan.stay) {
            for (j, id) in p.owners.iter().enumerate() {
                if stay.get(j) != Some(&true) {
                    let t = self.targets.remove(id).expect("owners are targets");
                    gone.push((*id, p.name.clone(), t));
                }
            }
        }
        let replaced: crate::hash::FastMap<OwnerId, usize> =
            gone.iter().enumerate().map(|(i, (id, ..))| (*id, i)).collect();
        let built_count = plan.profiles.iter().map(|p| p.built.len()).sum();
        self.targets.reserve(built_count);
        let mut built = Vec::with_capacity(built_count);
        let mut dirty = Vec::with_capacity(plan.profiles.len());
        for (pix, planned) in plan.profiles.into_iter().enumerate() {
            let mut entry = planned.entry;
            if let Some(w) = planned.old.map(|o| &old_profiles[o]) {
                (entry.counts, entry.status, entry.fail_open, entry.behind) =
                    (w.counts, w.status, w.fail_open, w.behind);
                if planned.old != Some(pix) {
                    for id in &entry.owners {
                        if let Some(t) = self.targets.get_mut(id) {
                            t.profile_ix = pix as u32;
                        }
                    }
                }
            }
            for (id, mut t) in planned.built {
                let was = replaced.get(&id).map(|&i| {
                    let before = &mut gone[i].2;
                    // The scheduled check moves over when it is the same; another one (a reload
                    // changed its timing or request) ends with `before`, and the runner
                    // registers the successor's.
                    if before.spec.key() == t.spec.key() {
                        t.check = before.check.take();
                    }
                    before.should_probe()
                });
                built.push((id, was));
                self.targets.insert(id, t);
            }
            dirty.push(planned.dirty);
            self.profiles.push(entry);
        }
        self.parents.clear();
        for (pix, p) in self.profiles.iter().enumerate() {
            for (nix, n) in p.nested.iter().enumerate() {
                self.parents.entry(n.child).or_default().push((pix, nix));
            }
        }
        self.prune_certs();
        self.prune_agents();
        Swapped { gone, built, dirty }
    }
}
