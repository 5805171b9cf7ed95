//! A check's identity: the text that spells out everything a probe depends on, and the key
//! hashed from it. The state file keeps the key's fingerprint to resume health only for the
//! very same check, and cluster nodes agree on checks by it, so the text must not change unless
//! the check does: it is written field by field from typed values, each named, strings
//! length-prefixed, durations in nanoseconds, under a version (`k2`). Nothing in it comes from
//! a `Debug` implementation, whose output Rust does not promise to keep.
//!
//! Before `k2` the text was partly `Debug` output (`legacy`): a state file written then is
//! still read, its fingerprints matched against the legacy text of each check once, at load.
use std::{net::SocketAddr, time::Duration};

use crate::{
    config::{Endpoint, Pacing, Probe, Profile},
    probe::EndpointCheck,
};

/// A check's identity: the stable 64-bit hash of its key text, which spells out everything a
/// probe depends on, and that of its question text (the key text less its timing, `texts`).
/// Targets and the scheduler hold this, 16 bytes, instead of the texts (~150 bytes a target at
/// a million targets). The key half is the one stored in the state file (`fingerprint`); the
/// question half is what cluster nodes shard checks by, so that a timing change moves no check
/// to another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CheckKey {
    stable: u64,
    question: u64,
}

impl CheckKey {
    pub fn of(text: &str, question: &str) -> Self {
        Self {
            stable: crate::hash::stable(text.as_bytes()),
            question: crate::hash::stable(question.as_bytes()),
        }
    }

    /// The key text's hash: the same in every process, build and node.
    pub fn stable(self) -> u64 {
        self.stable
    }

    /// The question text's hash: equal for checks that differ only in when and how long they
    /// wait; the same in every process, build and node.
    pub fn question(self) -> u64 {
        self.question
    }

    /// As the state file stores a check (`crate::hash::fingerprint` of the text).
    pub fn fingerprint(self) -> String {
        crate::hash::fingerprint_of(self.stable)
    }
}

/// What a check looks at: its protocol and where it goes. A reload or a restart that changes
/// either starts the endpoint over in CheckingEndpoint; any other change of its check (timing,
/// what it sends and expects) keeps its health as the new check's starting point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject {
    pub protocol: crate::config::Protocol,
    pub target: SocketAddr,
}

impl Subject {
    /// As the state file stores it (`s1`, written like the key text).
    pub fn fingerprint(self) -> String {
        let mut out = String::from("s1;");
        field(&mut out, "protocol", self.protocol.as_str());
        field(&mut out, "target", &self.target.to_string());
        crate::hash::fingerprint(&out)
    }
}

/// Everything a check's identity is made of.
pub(super) struct Parts<'a> {
    pub protocol: &'a str,
    pub target: SocketAddr,
    pub interval: Duration,
    pub timeout: Duration,
    pub pacing: &'a Pacing,
    /// What a probe sends and expects beyond where and when: the kind's settings, and what
    /// the endpoint adds to them.
    pub probe: &'a Probe,
    pub endpoint: EndpointCheck<'a>,
}

use crate::probe::key_field as field;

fn nanos(d: Duration) -> String {
    d.as_nanos().to_string()
}

fn optional(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_string(), nanos)
}

impl<'a> Parts<'a> {
    /// The identity of `endpoint`'s check in `profile`. Pacing is part of it: two profiles may
    /// share a probe only if they would send it at the same moments.
    pub fn of(profile: &'a Profile, endpoint: &'a Endpoint) -> Self {
        let health = &profile.health;
        Parts {
            protocol: health.protocol().as_str(),
            target: endpoint.socket_addr(),
            interval: health.interval,
            timeout: health.timeout,
            pacing: &health.pacing,
            probe: &health.probe,
            endpoint: super::check_of(endpoint),
        }
    }

    /// The key text, version `k2`, and the question text, `q1`: what the check asks, without
    /// when and how long it waits (the key text less its timing). Two checks with the same
    /// question and other timing look at the same thing: a reload that changes only the
    /// timing keeps the endpoint's results toward a change, and cluster nodes agree on an
    /// endpoint by its question, so that nodes with other timing (a configuration rolled out
    /// one node at a time) still count each other's votes.
    pub fn texts(&self) -> (String, String) {
        let target = self.target.to_string();
        let mut asked = String::new();
        self.question_fields(&mut asked);
        let mut text = String::from("k2;");
        field(&mut text, "protocol", self.protocol);
        field(&mut text, "target", &target);
        let mut question = text.replacen("k2;", "q1;", 1);
        field(&mut text, "interval_ns", &nanos(self.interval));
        field(&mut text, "timeout_ns", &nanos(self.timeout));
        field(&mut text, "fast_interval_ns", &optional(self.pacing.fast_interval));
        field(&mut text, "down_interval_ns", &optional(self.pacing.down_interval));
        field(&mut text, "initial_jitter_ns", &nanos(self.pacing.initial_jitter));
        field(&mut text, "jitter_percent", &self.pacing.jitter_percent.to_string());
        text.push_str(&asked);
        question.push_str(&asked);
        (text, question)
    }

    /// What a probe sends and expects, field by field, as `text` and `question` write it.
    fn question_fields(&self, out: &mut String) {
        self.probe.identity(&self.endpoint, out);
    }

    /// The key text as releases before `k2` wrote it (partly `Debug` output), whose
    /// fingerprints older state files hold.
    pub fn legacy(&self) -> String {
        let detail = self.probe.legacy(&self.endpoint);
        format!(
            "{} {} interval={}ms timeout={}ms pacing={:?}{}",
            self.protocol,
            self.target,
            self.interval.as_millis(),
            self.timeout.as_millis(),
            self.pacing,
            detail
        )
    }
}
