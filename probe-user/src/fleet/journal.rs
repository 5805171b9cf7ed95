//! The fleet journal: what the API made of each profile's endpoints, kept beside the state
//! file (`fleet_path`) so that a restart and a reload of the file keep it.
//!
//! One JSON line per applied batch, appended and synced before the API answers: the cost of a
//! batch on disk is in proportion to the batch, not to the fleet. A line that starts a profile
//! over (`reset`) holds all its endpoints: the journal is rewritten that way, one such line
//! per profile, when it is opened and whenever its lines hold four times as many items as the
//! fleet has endpoints, on the API's blocking thread, never the runner's. A last line cut short
//! (the daemon died while writing it) was never acknowledged and is left out.
use std::{
    collections::BTreeMap,
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// An endpoint as the API takes it.
pub type Item = serde_json::Map<String, serde_json::Value>;

/// One line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub profile: String,
    pub generation: u64,
    /// Forget what the profile had before this line.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub put: Vec<Item>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// A profile's endpoints as the journal holds them, by name, in the order the runner holds
/// them too: a put of a name it has takes that place, a new one goes last, and a remove moves
/// the last into the place it frees (the runner's `swap_remove`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    pub generation: u64,
    pub items: indexmap::IndexMap<String, Item>,
}

/// Every API profile's endpoints, by profile name.
pub type Fleet = BTreeMap<String, Held>;

/// The journal's path for a state file: the same path with the extension `.fleet`.
pub fn fleet_path(state_file: &Path) -> PathBuf {
    state_file.with_extension("fleet")
}

fn name_of(item: &Item) -> Option<&str> {
    item.get("name")?.as_str()
}

/// `entry` applied to `fleet`. An item without a name (never written so) is left out.
pub fn replay(fleet: &mut Fleet, entry: Entry) {
    let held = fleet.entry(entry.profile).or_default();
    if entry.reset {
        held.items.clear();
    }
    held.generation = entry.generation;
    for item in entry.put {
        if let Some(name) = name_of(&item).map(str::to_string) {
            held.items.insert(name, item);
        }
    }
    for name in &entry.remove {
        held.items.swap_remove(name);
    }
}

/// The journal file, open for appending.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Items in its lines, and endpoints in the fleet they make: when the first passes four
    /// times the second, it is rewritten.
    items: usize,
    endpoints: usize,
}

/// Why the journal cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{op} the fleet journal {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the fleet journal {}: line {line} is not a journal entry ({why}); it was written whole, so the file was changed by hand: fix or remove that line", path.display())]
    Bad { path: PathBuf, line: usize, why: String },
}

impl Journal {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal at `path` (created when there is none), rewritten compact from `fleet`,
    /// what `read_file` found in it, and open for appending.
    pub fn start(path: &Path, fleet: &Fleet) -> Result<Journal, JournalError> {
        rewrite(path, fleet)
    }

    /// Appends `entry` and syncs it to disk; rewrites the file compact (read back and
    /// replayed) once its lines hold four times as many items as the fleet has endpoints.
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let mut line = serde_json::to_vec(entry).expect("a journal entry serializes");
        line.push(b'\n');
        let io = |op: &'static str| {
            let path = self.path.clone();
            move |source| JournalError::Io { op, path, source }
        };
        self.file.write_all(&line).map_err(io("append to"))?;
        self.file.sync_data().map_err(io("sync"))?;
        self.items += entry.put.len() + entry.remove.len();
        // An estimate (a put may replace): only the rewrite's moment depends on it.
        self.endpoints = (self.endpoints + entry.put.len()).saturating_sub(entry.remove.len());
        if entry.reset || self.items > 4 * self.endpoints.max(1024) {
            let fleet = read_file(&self.path)?;
            *self = rewrite(&self.path, &fleet)?;
        }
        Ok(())
    }
}

/// The fleet a journal holds (empty when there is none), read without changing it.
pub fn read_file(path: &Path) -> Result<Fleet, JournalError> {
    match File::open(path) {
        Ok(f) => read(path, BufReader::new(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Fleet::new()),
        Err(source) => Err(JournalError::Io {
            op: "open",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads every whole line of a journal.
fn read(path: &Path, reader: impl BufRead) -> Result<Fleet, JournalError> {
    let mut fleet = Fleet::new();
    let mut lines = reader.split(b'\n').enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let line = line.map_err(|source| JournalError::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        })?;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Entry>(&line) {
            Ok(entry) => replay(&mut fleet, entry),
            // The last line, cut short: never acknowledged.
            Err(e) if lines.peek().is_none() && e.is_eof() => {
                log::warn!(
                    "the fleet journal {}: its last line was cut short (the daemon stopped while writing it); \
                     that batch was never acknowledged and is left out",
                    path.display()
                );
            }
            Err(e) => {
                return Err(JournalError::Bad {
                    path: path.to_path_buf(),
                    line: i + 1,
                    why: e.to_string(),
                })
            }
        }
    }
    Ok(fleet)
}

/// Writes `fleet` as one reset line per profile to a new file and puts it in place of the
/// journal at `path`: the journal open for appending after it.
fn rewrite(path: &Path, fleet: &Fleet) -> Result<Journal, JournalError> {
    let io = |op: &'static str| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { op, path, source }
    };
    let tmp = path.with_extension("fleet.tmp");
    let mut out = std::io::BufWriter::new(File::create(&tmp).map_err(io("create"))?);
    for (profile, held) in fleet {
        let entry = Entry {
            profile: profile.clone(),
            generation: held.generation,
            reset: true,
            put: held.items.values().cloned().collect(),
            remove: Vec::new(),
        };
        serde_json::to_writer(&mut out, &entry).expect("a journal entry serializes");
        out.write_all(b"\n").map_err(io("write"))?;
    }
    let file = out.into_inner().map_err(|e| io("write")(e.into_error()))?;
    file.sync_all().map_err(io("sync"))?;
    std::fs::rename(&tmp, path).map_err(io("replace"))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync the directory of"))?;
    }
    let file = OpenOptions::new().append(true).open(path).map_err(io("open"))?;
    let endpoints = fleet.values().map(|h| h.items.len()).sum();
    Ok(Journal {
        path: path.to_path_buf(),
        file,
        items: endpoints,
        endpoints,
    })
}
