//! Last known health, saved to a small JSON file so a restart resumes without a flap.
//!
//! A file rather than a pinned map: the daemon removes its pins on SIGTERM (no half state), a
//! file survives reboots of the daemon and upgrades of the eBPF object alike, it is readable
//! by an operator, and it is written by rename so a crash leaves the old or the new, never half.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use super::{views::LastChange, DaemonError};
use crate::status::{AdminState, Health};

/// Version 2: health, admin and the last change are typed enums (version 1 stored free
/// strings, and its `last_change` mixed two vocabularies). Other versions are refused.
const VERSION: u32 = 2;

/// A saved state older than this is ignored: the backend may have changed many times since.
pub const MAX_AGE_MS: u64 = 10 * 60 * 1000;
/// How far ahead of the clock a file's save time may be (NTP steps) and still count as fresh.
pub const MAX_CLOCK_SKEW_MS: u64 = 60 * 1000;

/// What is kept of one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedTarget {
    /// Shared with the table's target: a snapshot of a million endpoints copies no names.
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    /// The check key's fingerprint (`hash::fingerprint`): health is resumed only for the very
    /// same check. A fingerprint, not the key, because the key holds request headers.
    pub check: String,
    pub health: Health,
    /// Set through the API, so it survives a restart.
    pub admin_override: Option<AdminState>,
    pub last_change: Option<LastChange>,
}

/// A profile the operator enabled or disabled through the API, against its configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedProfile {
    pub profile: String,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    saved_unix_ms: u64,
    targets: Vec<SavedTarget>,
    /// Absent in files written before profile overrides existed (same version: a reader that
    /// predates them ignores the key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    profiles: Vec<SavedProfile>,
}

/// What a restart resumes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Saved {
    /// By profile, then endpoint (looked up by `&str`, without copying names).
    pub targets: HashMap<Arc<str>, HashMap<Arc<str>, SavedTarget>>,
    /// The API's profile overrides: enabled or not, by profile name.
    pub profiles: HashMap<String, bool>,
}

impl Saved {
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.profiles.is_empty()
    }

    /// What was saved of `endpoint` of `profile`.
    pub fn target(&self, profile: &str, endpoint: &str) -> Option<&SavedTarget> {
        self.targets.get(profile)?.get(endpoint)
    }
}

/// Reads the file; a missing, unreadable, foreign-version or stale file gives nothing (and a
/// warning), because starting over in CheckingEndpoint is always safe. A version 1 file gives
/// its health and API overrides (see `parse`).
pub fn load(path: &Path, now_unix_ms: u64) -> Saved {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Saved::default(),
        Err(e) => {
            log::warn!("state file {}: {e}; starting every endpoint afresh", path.display());
            return Saved::default();
        }
    };
    let file = match parse(&text) {
        Ok(f) => f,
        Err(why) => {
            log::warn!("state file {}: {why}; starting every endpoint afresh", path.display());
            return Saved::default();
        }
    };
    if file.saved_unix_ms > now_unix_ms.saturating_add(MAX_CLOCK_SKEW_MS) {
        // Saved "in the future": the clock was stepped back, or the file was not written by
        // this daemon. Its age cannot be known, so it would never go stale: start afresh.
        log::warn!(
            "state file {} claims to be saved {} s from now; starting every endpoint afresh",
            path.display(),
            (file.saved_unix_ms - now_unix_ms) / 1000
        );
        return Saved::default();
    }
    if now_unix_ms.saturating_sub(file.saved_unix_ms) > MAX_AGE_MS {
        log::info!(
            "state file {} is older than {} minutes; starting afresh",
            path.display(),
            MAX_AGE_MS / 60_000
        );
        return Saved::default();
    }
    Saved {
        targets: file.targets.into_iter().fold(HashMap::new(), |mut by, t| {
            by.entry(t.profile.clone())
                .or_insert_with(HashMap::new)
                .insert(t.endpoint.clone(), t);
            by
        }),
        profiles: file.profiles.into_iter().map(|p| (p.profile, p.enabled)).collect(),
    }
}

/// The file's targets, from version 2, or from version 1 without its last changes.
///
/// Version 1 stored health and the API override as the same names the enums use now, so they
/// carry over: an upgrade must not put back into rotation an endpoint an operator disabled for
/// maintenance. Its `last_change` mixed two vocabularies and is dropped. Other versions (a
/// newer probed's file after a downgrade) are refused.
fn parse(text: &str) -> Result<StateFile, String> {
    #[derive(Deserialize)]
    struct Version {
        version: u32,
    }
    #[derive(Deserialize)]
    struct V1Target {
        profile: String,
        endpoint: String,
        check: String,
        health: Health,
        admin_override: Option<AdminState>,
    }
    #[derive(Deserialize)]
    struct V1File {
        saved_unix_ms: u64,
        targets: Vec<V1Target>,
    }
    let invalid = |e: serde_json::Error| format!("not valid ({e})");
    match serde_json::from_str::<Version>(text).map_err(invalid)?.version {
        VERSION => serde_json::from_str(text).map_err(invalid),
        1 => {
            let v1: V1File = serde_json::from_str(text).map_err(invalid)?;
            log::warn!("state file of version 1: health and API overrides resumed, last changes dropped");
            Ok(StateFile {
                version: VERSION,
                saved_unix_ms: v1.saved_unix_ms,
                targets: v1
                    .targets
                    .into_iter()
                    .map(|t| SavedTarget {
                        profile: t.profile.into(),
                        endpoint: t.endpoint.into(),
                        // Version 1 stored the key itself.
                        check: crate::hash::fingerprint(&t.check),
                        health: t.health,
                        admin_override: t.admin_override,
                        last_change: None,
                    })
                    .collect(),
                profiles: Vec::new(),
            })
        }
        v => Err(format!("version {v}, this probed reads versions 1 and {VERSION}")),
    }
}

/// Writes the file atomically (a temporary beside it, fsync, rename), targets in profile and
/// endpoint order so that it diffs cleanly.
pub fn save(
    path: &Path,
    mut targets: Vec<SavedTarget>,
    mut profiles: Vec<SavedProfile>,
    now_unix_ms: u64,
) -> Result<(), DaemonError> {
    use std::io::Write;
    targets.sort_by(|a, b| (&a.profile, &a.endpoint).cmp(&(&b.profile, &b.endpoint)));
    profiles.sort_by(|a, b| a.profile.cmp(&b.profile));
    let io = |op: &'static str, p: &Path| {
        let path = Some(p.to_path_buf());
        move |source| DaemonError::Io { op, path, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("create the state directory", dir))?;
    }
    let file = StateFile {
        version: VERSION,
        saved_unix_ms: now_unix_ms,
        targets,
        profiles,
    };
    // Compact: at 100k targets pretty-printing cost the writer thread a core's worth of time
    // during bursts of changes; `jq . state.json` reads it just as well. Streamed through a
    // buffer: the whole document as one string was the daemon's largest peak (about 500 bytes
    // a target, twice over while it grew).
    let tmp = temp_path(path);
    let f = create_private(&tmp).map_err(io("create", &tmp))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
    serde_json::to_writer(&mut w, &file)
        .map_err(std::io::Error::from)
        .and_then(|()| w.flush())
        .map_err(io("write", &tmp))?;
    let f = w.into_inner().map_err(|e| io("write", &tmp)(e.into_error()))?;
    f.sync_all().map_err(io("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("rename the state file into", path))
}

/// One queued save.
struct Job {
    path: PathBuf,
    targets: Vec<SavedTarget>,
    profiles: Vec<SavedProfile>,
    at_unix_ms: u64,
}

/// Writes the state file on a thread of its own: an fsync can take tens of milliseconds on a busy
/// disk, which the probe loop must never wait for. Only the newest pending state is written.
pub struct Saver {
    tx: Option<std::sync::mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Saver {
    pub fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("probed-state".into())
            .spawn(move || {
                while let Ok(mut job) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        job = newer;
                    }
                    if let Err(e) = save(&job.path, job.targets, job.profiles, job.at_unix_ms) {
                        log::warn!("cannot save state: {e}");
                    }
                }
            })
            .ok();
        Self { tx: Some(tx), thread }
    }

    /// Queues a save of the state as of `at_unix_ms`; returns at once.
    pub fn save(&self, path: &Path, targets: Vec<SavedTarget>, profiles: Vec<SavedProfile>, at_unix_ms: u64) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Job {
                path: path.to_path_buf(),
                targets,
                profiles,
                at_unix_ms,
            });
        }
    }

    /// Writes what is queued and stops the thread.
    pub fn finish(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Default for Saver {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Saver {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A temporary name beside `path`, new for every save of this process.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{}.{n}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Creates `path` for this user only (0600), failing if anything is there already, a symlink
/// included: a file planted at the name (in a directory others can write) is never followed
/// or truncated.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(health: Health) -> SavedTarget {
        SavedTarget {
            profile: "web".into(),
            endpoint: "a".into(),
            check: "tcp 198.18.0.1:80".into(),
            health,
            admin_override: Some(AdminState::Disabled),
            last_change: None,
        }
    }

    #[test]
    fn the_file_is_private_and_a_planted_link_is_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("probed-state-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        save(&path, vec![target(Health::Healthy)], Vec::new(), 1_000_000).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the daemon's user reads its state");
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let planted = dir.join("planted.tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(
            create_private(&planted).is_err(),
            "an existing name is refused, link or not"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn round_trip_and_staleness() {
        let dir = std::env::temp_dir().join(format!("probed-state-{}", std::process::id()));
        let path = dir.join("state.json");
        let off = SavedProfile {
            profile: "web".into(),
            enabled: false,
        };
        save(&path, vec![target(Health::Healthy)], vec![off], 1_000_000).unwrap();
        let got = load(&path, 1_000_500);
        assert_eq!(*got.target("web", "a").expect("saved"), target(Health::Healthy));
        assert!(!got.profiles["web"], "the profile override comes back");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(r#""health":"Healthy","admin_override":"disabled""#),
            "enums on the wire: {text}"
        );
        let v3 = text.replace(r#""version":2"#, r#""version":3"#);
        std::fs::write(&path, v3).unwrap();
        assert!(
            load(&path, 1_000_500).is_empty(),
            "a file of an unknown version is refused"
        );
        // Version 1, as the first cut wrote it: health and the override carry over.
        let v1 = r#"{"version":1,"saved_unix_ms":1000000,"targets":[{"profile":"web","endpoint":"a",
            "check":"tcp 198.18.0.1:80","health":"Healthy","admin_override":"disabled",
            "last_change":{"at_unix_ms":999000,"from":"CheckingEndpoint","to":"Healthy",
            "measured_window_ms":1.0,"formula_window_ms":1.0}}]}"#;
        std::fs::write(&path, v1).unwrap();
        let migrated = load(&path, 1_000_500).target("web", "a").expect("migrated").clone();
        assert_eq!(
            migrated,
            SavedTarget {
                check: crate::hash::fingerprint("tcp 198.18.0.1:80"),
                ..target(Health::Healthy)
            },
            "health and override carry over; the key becomes its fingerprint"
        );
        assert!(
            load(&path, 1_000_000 + MAX_AGE_MS + 1).is_empty(),
            "stale state is ignored"
        );
        assert!(
            !load(&path, 1_000_000 - MAX_CLOCK_SKEW_MS).is_empty(),
            "a save a little ahead of the clock (an NTP step) still counts"
        );
        assert!(
            load(&path, 1_000_000 - MAX_CLOCK_SKEW_MS - 1).is_empty(),
            "a save further in the future never goes stale, so it is ignored"
        );
        std::fs::write(&path, "{ not json").unwrap();
        assert!(load(&path, 1_000_500).is_empty(), "a corrupt file is ignored");
        assert!(load(&dir.join("missing.json"), 0).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
