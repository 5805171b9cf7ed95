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
    /// The check key's fingerprint (`hash::fingerprint`): in files without `subject`, health is
    /// resumed only for the very same check. A fingerprint, not the key, because the key holds
    /// request headers.
    pub check: String,
    /// The fingerprint of what the check looks at (`checks::Subject`): health is resumed when
    /// it is the same, whatever else of the check changed. Absent in files written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
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

/// The file as read: `{"version", "saved_unix_ms", "targets": [...], "profiles": [...]}`
/// (`Writer` writes it in that order; `profiles` is absent in files written before profile
/// overrides existed, and when there are none).
#[derive(Deserialize)]
struct FileRead {
    version: u32,
    saved_unix_ms: u64,
    targets: Vec<TargetRead>,
    #[serde(default)]
    profiles: Vec<SavedProfile>,
}

/// A target of either version, its last change checked once the version is known (which
/// may come after the targets in a file not written by probed).
#[derive(Deserialize)]
struct TargetRead {
    profile: Arc<str>,
    endpoint: Arc<str>,
    check: String,
    #[serde(default)]
    subject: Option<String>,
    health: Health,
    admin_override: Option<AdminState>,
    #[serde(default)]
    last_change: Option<ChangeRead>,
}

/// A last change as version 2 writes it, or anything else (version 1's, to be dropped).
#[derive(Deserialize)]
#[serde(untagged)]
enum ChangeRead {
    Known(LastChange),
    Other(serde::de::IgnoredAny),
}

impl TargetRead {
    fn into_saved(self, v1: bool) -> Result<SavedTarget, Unreadable> {
        let last_change = match self.last_change {
            _ if v1 => None,
            Some(ChangeRead::Known(c)) => Some(c),
            Some(ChangeRead::Other(_)) => {
                return Err(Unreadable::LastChange {
                    profile: self.profile,
                    endpoint: self.endpoint,
                })
            }
            None => None,
        };
        Ok(SavedTarget {
            // Version 1 stored the key itself.
            check: if v1 {
                crate::hash::fingerprint(&self.check)
            } else {
                self.check
            },
            subject: self.subject,
            profile: self.profile,
            endpoint: self.endpoint,
            health: self.health,
            admin_override: self.admin_override,
            last_change,
        })
    }
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
    // Read through a buffer, not into one string: at a million targets the file is ~250 MB,
    // and the text and the parsed targets both held at once were the restart's peak.
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Saved::default(),
        Err(e) => {
            log::warn!("state file {}: {e}; starting every endpoint afresh", path.display());
            return Saved::default();
        }
    };
    let read = serde_json::from_reader::<_, FileRead>(std::io::BufReader::with_capacity(1 << 16, file))
        .map_err(Unreadable::Json)
        .and_then(|f| check_version(f.version).map(|v1| (f, v1)));
    let (file, v1) = match read {
        Ok(read) => read,
        Err(why) => {
            let why = crate::errors::chain(&why);
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
    let mut targets: HashMap<Arc<str>, HashMap<Arc<str>, SavedTarget>> = HashMap::new();
    for t in file.targets {
        match t.into_saved(v1) {
            Ok(t) => {
                targets
                    .entry(t.profile.clone())
                    .or_default()
                    .insert(t.endpoint.clone(), t);
            }
            Err(why) => {
                log::warn!("state file {}: {why}; starting every endpoint afresh", path.display());
                return Saved::default();
            }
        }
    }
    let profiles = if v1 { Vec::new() } else { file.profiles };
    Saved {
        targets,
        profiles: profiles.into_iter().map(|p| (p.profile, p.enabled)).collect(),
    }
}

/// Whether a file of `version` is read as version 1 (see `TargetRead::into_saved`): version 1
/// stored health and the API override as the same names the enums use now, so they carry over
/// (an upgrade must not put back into rotation an endpoint an operator disabled for
/// maintenance), and its `last_change` mixed two vocabularies and is dropped. Other versions
/// (a newer probed's file after a downgrade) are refused.
fn check_version(version: u32) -> Result<bool, Unreadable> {
    match version {
        VERSION => Ok(false),
        1 => {
            log::warn!("state file of version 1: health and API overrides resumed, last changes dropped");
            Ok(true)
        }
        found => Err(Unreadable::Version { found }),
    }
}

/// Why a state file is not resumed (every endpoint then starts afresh).
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("not valid")]
    Json(#[source] serde_json::Error),
    #[error("not valid (the last change of {endpoint:?} in {profile:?} is not one)")]
    LastChange { profile: Arc<str>, endpoint: Arc<str> },
    #[error("version {found}, this probed reads versions 1 and {VERSION}")]
    Version { found: u32 },
}

/// Writes the file atomically (a temporary beside it, fsync, rename), targets in the order
/// given (the runner gives the table's: profiles, then endpoints, as configured).
pub fn save(
    path: &Path,
    targets: Vec<SavedTarget>,
    profiles: Vec<SavedProfile>,
    now_unix_ms: u64,
) -> Result<(), DaemonError> {
    let mut file = Writer::begin(path, now_unix_ms)?;
    file.targets(&targets)?;
    file.finish(&profiles)
}

/// A state file being written: opened with its header, the targets streamed in, closed with
/// the profiles and renamed into place. Dropped unfinished, it removes its temporary.
///
/// Streamed because a snapshot of the whole table held at once was the daemon's largest
/// recurring peak: at a million targets ~110 MB every rewrite, for as long as it took to
/// serialise.
struct Writer {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
    written: usize,
}

fn io_error(op: &'static str, p: &Path) -> impl FnOnce(std::io::Error) -> DaemonError {
    let path = Some(p.to_path_buf());
    move |source| DaemonError::Io { op, path, source }
}

impl Writer {
    fn begin(path: &Path, now_unix_ms: u64) -> Result<Self, DaemonError> {
        use std::io::Write;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_error("create the state directory", dir))?;
        }
        let tmp = temp_path(path);
        let f = create_private(&tmp).map_err(io_error("create", &tmp))?;
        // Compact: at 100k targets pretty-printing cost the writer thread a core's worth of
        // time during bursts of changes; `jq . state.json` reads it just as well. The fields
        // in `FileRead`'s order.
        let mut file = Self {
            path: path.to_path_buf(),
            tmp,
            out: Some(std::io::BufWriter::with_capacity(1 << 16, f)),
            written: 0,
        };
        let header = format!(r#"{{"version":{VERSION},"saved_unix_ms":{now_unix_ms},"targets":["#);
        let out = file.out.as_mut().expect("just opened");
        out.write_all(header.as_bytes()).map_err(io_error("write", &file.tmp))?;
        Ok(file)
    }

    fn targets(&mut self, targets: &[SavedTarget]) -> Result<(), DaemonError> {
        use std::io::Write;
        let out = self.out.as_mut().expect("open until finished");
        let mut put = |t: &SavedTarget, first: bool| -> std::io::Result<()> {
            if !first {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut *out, t).map_err(std::io::Error::from)
        };
        for t in targets {
            put(t, self.written == 0).map_err(io_error("write", &self.tmp))?;
            self.written += 1;
        }
        Ok(())
    }

    fn finish(mut self, profiles: &[SavedProfile]) -> Result<(), DaemonError> {
        use std::io::Write;
        let out = self.out.take().expect("open until finished");
        let closed = (move || -> std::io::Result<std::fs::File> {
            let mut out = out;
            out.write_all(b"]")?;
            if !profiles.is_empty() {
                out.write_all(br#","profiles":"#)?;
                serde_json::to_writer(&mut out, profiles)?;
            }
            out.write_all(b"}")?;
            out.into_inner().map_err(std::io::IntoInnerError::into_error)
        })();
        let f = closed.map_err(io_error("write", &self.tmp))?;
        f.sync_all().map_err(io_error("write", &self.tmp))?;
        std::fs::rename(&self.tmp, &self.path).map_err(io_error("rename the state file into", &self.path))?;
        self.written = usize::MAX;
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.written != usize::MAX {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// A part of a snapshot on its way to the file: the runner copies the table a slice per loop
/// turn and hands each slice over as it goes.
pub struct Part {
    /// Which snapshot it belongs to: the first part of a newer one abandons an older one
    /// left unfinished (the table was replaced meanwhile).
    pub snapshot: u64,
    /// On the first part: the file, and the time the state is saved as of.
    pub open: Option<(PathBuf, u64)>,
    pub targets: Vec<SavedTarget>,
    /// On the last part: the profile overrides, which close the file.
    pub close: Option<Vec<SavedProfile>>,
}

/// Parts queued for the saver at most: a stalled disk holds up the snapshot (the runner keeps
/// its place), never the probe loop. One: with the part being written and the one the runner
/// holds, three slices at most are in memory (the saver is niced, so while the core is busy,
/// as in a first round, the queue is full; four held 4.5 MB of 65k targets' snapshot there).
const PARTS_QUEUED: usize = 1;

/// Writes the state file on a thread of its own: an fsync can take tens of milliseconds on a busy
/// disk, which the probe loop must never wait for.
pub struct Saver {
    tx: Option<std::sync::mpsc::SyncSender<Part>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Saver {
    pub fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Part>(PARTS_QUEUED);
        let thread = std::thread::Builder::new()
            .name("probed-state".into())
            .spawn(move || {
                super::lower_this_thread();
                let mut open: Option<(u64, Writer)> = None;
                let warn = |e: DaemonError| log::warn!("cannot save state: {e}");
                while let Ok(part) = rx.recv() {
                    if let Some((path, at_unix_ms)) = &part.open {
                        open = None;
                        match Writer::begin(path, *at_unix_ms) {
                            Ok(w) => open = Some((part.snapshot, w)),
                            Err(e) => warn(e),
                        }
                    }
                    let Some((_, file)) = open.as_mut().filter(|(id, _)| *id == part.snapshot) else {
                        continue;
                    };
                    if let Err(e) = file.targets(&part.targets) {
                        warn(e);
                        open = None;
                        continue;
                    }
                    if let Some(profiles) = part.close {
                        if let Some((_, file)) = open.take() {
                            file.finish(&profiles).unwrap_or_else(warn);
                        }
                    }
                }
            })
            .ok();
        Self { tx: Some(tx), thread }
    }

    /// Queues `part` if there is room; gives it back when the saver is behind.
    pub fn offer(&self, part: Part) -> Result<(), Part> {
        match self.tx.as_ref().map(|tx| tx.try_send(part)) {
            Some(Err(std::sync::mpsc::TrySendError::Full(part))) => Err(part),
            _ => Ok(()),
        }
    }

    /// Queues `part`, waiting for room (at shutdown).
    pub fn send(&self, part: Part) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(part);
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
            subject: None,
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
    fn the_saver_streams_parts_and_a_newer_snapshot_abandons_an_older_one() {
        let dir = std::env::temp_dir().join(format!("probed-state-parts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("state.json");
        let named = |endpoint: &str, health| SavedTarget {
            endpoint: endpoint.into(),
            ..target(health)
        };
        let part = |snapshot, open: bool, endpoint: &str, close: bool| Part {
            snapshot,
            open: open.then(|| (path.clone(), 1_000_000)),
            targets: vec![named(endpoint, Health::Healthy)],
            close: close.then(Vec::new),
        };
        let mut saver = Saver::new();
        saver.send(part(1, true, "a", false));
        // The table was replaced: snapshot 1 never finishes, and a late part of it is ignored.
        saver.send(part(2, true, "b", false));
        saver.send(part(1, false, "c", true));
        saver.send(part(2, false, "d", true));
        saver.finish();
        let got = load(&path, 1_000_500);
        let mut names: Vec<_> = got.targets["web"].keys().map(ToString::to_string).collect();
        names.sort();
        assert_eq!(names, ["b", "d"], "only the finished snapshot's parts");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["state.json"], "the abandoned file's temporary is gone");
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
        let odd_change = r#"{"version":2,"saved_unix_ms":1000000,"targets":[{"profile":"web","endpoint":"a",
            "check":"x","health":"Healthy","admin_override":null,"last_change":{"at":1}}]}"#;
        std::fs::write(&path, odd_change).unwrap();
        assert!(
            load(&path, 1_000_500).is_empty(),
            "a version 2 file whose last change is not one is refused whole"
        );
        std::fs::write(&path, "{ not json").unwrap();
        assert!(load(&path, 1_000_500).is_empty(), "a corrupt file is ignored");
        assert!(load(&dir.join("missing.json"), 0).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
