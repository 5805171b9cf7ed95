//! The fleet API on the runner's side: what a batch is checked against (`fleet_lookup`), and
//! the checked batch applied (`fleet_apply`) at a cost in proportion to it: each endpoint is
//! found by name in the profile's index, built (carrying its health over when its check still
//! looks at the same, as a reload does), and put in, removed or left alone; the profile's
//! counts move by the difference (`Table::settle_fleet`). Nothing changes until every put is
//! built.
use std::sync::Arc;

use crate::{
    config::{Config, EndpointSource},
    daemon::{
        checks::Specs,
        protocol::{Carried, FleetDone, FleetRequest, RequestError},
        runner::{first_l4, FleetBook, FleetProfile, Runner},
        table::Swapped,
    },
    fleet::{routing_claims, Applied, FleetPage, Lookup, Op},
};

impl Runner {
    /// The index of profile `name`, which the API must own.
    fn api_profile(&self, name: &str) -> Result<usize, RequestError> {
        let (pix, p) = self
            .config
            .profiles
            .iter()
            .enumerate()
            .find(|(_, p)| p.name == name)
            .ok_or_else(|| RequestError::NoProfile(name.to_string()))?;
        if !p.endpoints_from.at_run_time() {
            return Err(RequestError::NotApi(name.to_string()));
        }
        Ok(pix)
    }

    /// Endpoint `endpoint` of `profile`: through the fleet's index in a profile the API owns
    /// (one lookup), else by the table's walk of the profile's endpoints.
    pub(in crate::daemon) fn locate(
        &mut self,
        profile: &str,
        endpoint: &str,
    ) -> Result<crate::daemon::table::OwnerId, RequestError> {
        let Ok(pix) = self.api_profile(profile) else {
            return super::status::find(&self.table, profile, endpoint);
        };
        let at = self
            .fleet_entry(pix)
            .index
            .as_ref()
            .and_then(|i| i.get(endpoint).copied());
        at.and_then(|j| self.table.profiles()[pix].owners.get(j as usize).copied())
            .ok_or_else(|| RequestError::NoEndpoint {
                profile: profile.into(),
                endpoint: endpoint.into(),
            })
    }

    /// Profile `pix`'s book entry, its index made.
    fn fleet_entry(&mut self, pix: usize) -> &mut FleetProfile {
        let profile = &self.config.profiles[pix];
        let entry = self.fleet.entry(self.table.profiles()[pix].name.clone()).or_default();
        entry.index.get_or_insert_with(|| {
            profile
                .endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| (e.name.clone(), i as u32))
                .collect()
        });
        entry
    }

    pub(in crate::daemon) fn fleet_lookup(&mut self, profile: &str, names: &[String]) -> Result<Lookup, RequestError> {
        let pix = self.api_profile(profile)?;
        let generation = self.fleet_entry(pix).generation;
        let index = self.fleet[&*self.table.profiles()[pix].name]
            .index
            .as_ref()
            .expect("made just above");
        let p = &self.config.profiles[pix];
        let found = names
            .iter()
            .filter_map(|n| {
                let j = *index.get(n.as_str())? as usize;
                Some((n.clone(), (j, p.endpoints[j].clone())))
            })
            .collect();
        Ok(Lookup {
            settings: p.settings(),
            generation,
            count: p.endpoints.len(),
            found,
            all: routing_claims(p.routing).then(|| p.endpoints.iter().cloned().enumerate().collect()),
        })
    }

    pub(in crate::daemon) fn fleet_apply(&mut self, req: FleetRequest) -> Result<FleetDone, RequestError> {
        let started = std::time::Instant::now();
        let pix = self.api_profile(&req.profile)?;
        match (self.config.profiles[pix].endpoints_from, req.by_discovery) {
            (EndpointSource::Dns, false) => return Err(RequestError::Discovered(req.profile)),
            (EndpointSource::Api, true) => return Err(RequestError::NotApi(req.profile)),
            _ => {}
        }
        let current = self.fleet_entry(pix).generation;
        if let Some(expected) = req.generation.filter(|&g| g != current) {
            return Err(RequestError::Generation {
                profile: req.profile,
                expected,
                current,
            });
        }
        let name = self.table.profiles()[pix].name.clone();
        let mut applied = Applied {
            profile: req.profile.clone(),
            generation: current,
            ..Applied::default()
        };
        // Every put built first: one that cannot be leaves everything as it was.
        let mut next_id = self.next_owner;
        let mut puts = Vec::new();
        let mut removes = Vec::new();
        let mut errors = Vec::new();
        {
            let index = self.fleet[&name].index.as_ref().expect("made by fleet_entry");
            let profile = &self.config.profiles[pix];
            let mut specs = Specs::new(profile);
            for op in req.ops {
                match op {
                    Op::Put(e) => {
                        let at = index.get(&e.name).map(|&j| j as usize);
                        if at.is_some_and(|j| profile.endpoints[j] == e) {
                            applied.unchanged += 1;
                            continue;
                        }
                        match self.table.build_fleet(&mut specs, pix, &e, at, &mut next_id) {
                            Ok((id, mut t)) => {
                                self.cluster_share_one(profile, &mut t);
                                if at.is_some() {
                                    applied.changed += 1;
                                } else {
                                    applied.added += 1;
                                }
                                puts.push((at, id, t, e));
                            }
                            Err(why) => errors.push(format!("{}: {why}", e.name)),
                        }
                    }
                    Op::Remove(n) if index.contains_key(&n) => {
                        applied.removed += 1;
                        removes.push(n);
                    }
                    Op::Remove(_) => applied.unchanged += 1,
                }
            }
        }
        if !errors.is_empty() {
            return Err(RequestError::Refused(errors.join("\n")));
        }
        // The engine runs before the first TCP or UDP endpoint goes in; if it cannot, nothing
        // changes.
        if self.probe.l4.port.is_none() {
            let settings = self.config.without_profiles();
            let first = first_l4(puts.iter().map(|(_, _, t, _)| &**t.spec()), &settings);
            self.ensure_l4(&settings, first)
                .map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?;
        }
        if puts.is_empty() && removes.is_empty() {
            applied.endpoints = self.config.profiles[pix].endpoints.len();
            applied.runner_us = started.elapsed().as_micros() as u64;
            return Ok(FleetDone {
                applied,
                config: req.want_config.then(|| self.config.clone()),
            });
        }
        self.next_owner = next_id;
        let before = self.before_swap();
        let mut swapped = Swapped {
            gone: Vec::new(),
            built: Vec::new(),
            dirty: Vec::new(),
        };
        let book = self.fleet.get_mut(&name).expect("made by fleet_entry");
        let index = book.index.as_mut().expect("made by fleet_entry");
        // The same order as the journal replays it: puts, then removes, each a swap_remove.
        let endpoints = &mut Arc::make_mut(&mut self.config).profiles[pix].endpoints;
        for (at, id, t, e) in puts {
            match at {
                Some(j) => endpoints[j] = e,
                None => {
                    index.insert(e.name.clone(), endpoints.len() as u32);
                    endpoints.push(e);
                }
            }
            self.table.fleet_put(pix, at, id, t, &mut swapped);
        }
        for n in removes {
            let Some(j) = index.remove(&n).map(|j| j as usize) else {
                continue;
            };
            endpoints.swap_remove(j);
            if let Some(moved) = endpoints.get(j) {
                index.insert(moved.name.clone(), j as u32);
            }
            self.table.fleet_remove(pix, j, &mut swapped);
        }
        book.generation += 1;
        applied.generation = book.generation;
        applied.endpoints = endpoints.len();
        self.after_swap(&swapped, &before, |table, s| table.settle_fleet(pix, &s.gone, &s.built));
        applied.runner_us = started.elapsed().as_micros() as u64;
        log::info!(
            "fleet: profile {}: {} added, {} changed, {} removed (generation {}, {} µs of the runner's time)",
            applied.profile,
            applied.added,
            applied.changed,
            applied.removed,
            applied.generation,
            applied.runner_us
        );
        Ok(FleetDone {
            applied,
            config: req.want_config.then(|| self.config.clone()),
        })
    }

    /// The running profiles the API owns, for a reload to carry over.
    pub(in crate::daemon) fn fleet_carry(&self) -> Vec<Carried> {
        self.config
            .profiles
            .iter()
            .filter(|p| p.endpoints_from.at_run_time())
            .map(|p| Carried {
                name: p.name.clone(),
                endpoints: p.endpoints.clone(),
                generation: self.fleet.get(p.name.as_str()).map_or(0, |f| f.generation),
                settings: p.settings(),
            })
            .collect()
    }

    /// Endpoints `offset..offset + limit` of `profile`, copied as they are: a million of them
    /// turned into JSON here would hold probing for seconds.
    pub(in crate::daemon) fn fleet_page(
        &self,
        profile: &str,
        offset: usize,
        limit: usize,
    ) -> Result<FleetPage, RequestError> {
        let p = self
            .config
            .profiles
            .iter()
            .find(|p| p.name == profile)
            .ok_or_else(|| RequestError::NoProfile(profile.to_string()))?;
        let from = offset.min(p.endpoints.len());
        let to = from.saturating_add(limit).min(p.endpoints.len());
        Ok(FleetPage {
            profile: p.name.clone(),
            endpoints_from: p.endpoints_from,
            generation: self.fleet.get(profile).map_or(0, |f| f.generation),
            total: p.endpoints.len(),
            offset: from,
            endpoints: p.endpoints[from..to].to_vec(),
        })
    }

    /// At the start: the book of the configuration's API profiles, at the journal's
    /// generations.
    pub(in crate::daemon) fn start_fleet(&mut self, generations: &[(String, u64)]) {
        let config = self.config.clone();
        self.fleet_rebook(&config, generations);
    }

    /// After a reload to `config`: the book holds its API profiles, at the generations given
    /// (those it does not name keep theirs), their indexes made again at their next batch.
    pub(in crate::daemon) fn fleet_rebook(&mut self, config: &Config, generations: &[(String, u64)]) {
        let mut book = FleetBook::default();
        for p in config.profiles.iter().filter(|p| p.endpoints_from.at_run_time()) {
            let generation = generations
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, g)| *g)
                .or_else(|| self.fleet.get(p.name.as_str()).map(|f| f.generation))
                .unwrap_or(0);
            book.insert(
                Arc::from(p.name.as_str()),
                FleetProfile {
                    generation,
                    index: None,
                },
            );
        }
        self.fleet = book;
    }
}
