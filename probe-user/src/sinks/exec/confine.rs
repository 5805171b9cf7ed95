//! What the exec sink's program may be and what it keeps: a file that only root or probed's own
//! user can change (the file itself and every directory and symbolic link on the way to it), run
//! with no capability at all, whatever probed holds.
use std::{
    ffi::OsString,
    fmt,
    os::unix::fs::MetadataExt,
    path::{Component, Path, PathBuf},
};

/// Symbolic links followed on the way to the program before giving up (the kernel's limit).
const MAX_LINKS: usize = 40;

/// Why a program is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsafe {
    /// The file, directory or link that fails.
    pub path: PathBuf,
    pub what: Part,
    pub problem: Problem,
    pub owner: u32,
    pub mode: u32,
    /// probed's effective uid, the one owner besides root that is trusted.
    pub daemon_uid: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Program,
    /// A script's `#!` interpreter (or that one's, when it is a script too).
    Interpreter,
    Directory,
    Link,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Owned by someone other than root and probed's user.
    Owner,
    /// Writable by its group or by others (a directory with the sticky bit excepted: there only
    /// an entry's owner may rename or remove it).
    Writable,
    /// Cannot be looked at, or too many links.
    Unreadable(String),
}

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.what {
            Part::Program => "the program",
            Part::Interpreter => "the interpreter",
            Part::Directory => "the directory",
            Part::Link => "the symbolic link",
        };
        let (path, owner, mode, me) = (self.path.display(), self.owner, self.mode & 0o7777, self.daemon_uid);
        match &self.problem {
            Problem::Owner => write!(
                f,
                "{what} {path} is owned by uid {owner} (mode {mode:04o}); only root or probed's own user \
                 (uid {me}) may own the program and the directories on its path"
            ),
            Problem::Writable => write!(
                f,
                "{what} {path} is writable by its group or others (owner uid {owner}, mode {mode:04o}); \
                 remove that write access (chmod go-w), or anyone who has it chooses what probed runs"
            ),
            Problem::Unreadable(e) => write!(f, "{what} {path}: {e}"),
        }
    }
}

impl std::error::Error for Unsafe {}

/// Scripts run by scripts that the kernel follows before it gives up.
const MAX_INTERPRETERS: usize = 4;

/// `check_path` for the program and, for a script, for its `#!` interpreter, and that one's
/// when it is a script too: whoever can change the interpreter chooses what the script does
/// (issue 46, L6).
pub fn check_program(program: &Path, daemon_uid: u32) -> Result<(), Unsafe> {
    check_path(program, daemon_uid, Part::Program)?;
    let mut script = program.to_path_buf();
    for _ in 0..MAX_INTERPRETERS {
        let interpreter = match interpreter_of(&script) {
            Ok(None) => return Ok(()),
            Ok(Some(i)) => i,
            Err(e) => {
                return Err(Unsafe {
                    path: script,
                    what: Part::Program,
                    problem: Problem::Unreadable(e),
                    owner: 0,
                    mode: 0,
                    daemon_uid,
                })
            }
        };
        check_path(&interpreter, daemon_uid, Part::Interpreter)?;
        script = interpreter;
    }
    Err(Unsafe {
        path: script,
        what: Part::Interpreter,
        problem: Problem::Unreadable(format!("scripts nested more than {MAX_INTERPRETERS} deep")),
        owner: 0,
        mode: 0,
        daemon_uid,
    })
}

/// The interpreter a script's `#!` line names; None for a file that is no script.
fn interpreter_of(path: &Path) -> Result<Option<PathBuf>, String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let n = file.read(&mut head).map_err(|e| e.to_string())?;
    let Some(line) = head[..n].strip_prefix(b"#!") else {
        return Ok(None);
    };
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let name = line
        .split(|b| *b == b' ' || *b == b'\t')
        .find(|w| !w.is_empty())
        .ok_or_else(|| "its #! line names no interpreter".to_string())?;
    Ok(Some(PathBuf::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name),
    )))
}

/// Follows `program` from the root, as the kernel will when it runs it, and checks every part
/// on the way: each directory, link and the file itself (`last`: the program or an
/// interpreter) must be owned by root or `daemon_uid`, and no directory (unless sticky) nor
/// the file may be writable by group or others. Otherwise someone else could choose what runs
/// as probed's user.
pub fn check_path(program: &Path, daemon_uid: u32, last: Part) -> Result<(), Unsafe> {
    let refuse = |path: &Path, what, problem, meta: Option<&std::fs::Metadata>| Unsafe {
        path: path.to_path_buf(),
        what,
        problem,
        owner: meta.map_or(0, MetadataExt::uid),
        mode: meta.map_or(0, MetadataExt::mode),
        daemon_uid,
    };
    let look = |path: &Path, what| {
        std::fs::symlink_metadata(path).map_err(|e| refuse(path, what, Problem::Unreadable(e.to_string()), None))
    };
    if !program.is_absolute() {
        let problem = Problem::Unreadable("not an absolute path".into());
        return Err(refuse(program, last, problem, None));
    }
    // The names still to walk, next on top; `at` is where the walk is, already checked.
    let mut pending = names(program);
    let mut at = PathBuf::from("/");
    let root = look(&at, Part::Directory)?;
    check_one(&root, Part::Directory, daemon_uid).map_err(|p| refuse(&at, Part::Directory, p, Some(&root)))?;
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let what = if pending.is_empty() { last } else { Part::Directory };
        let meta = look(&next, what)?;
        if meta.file_type().is_symlink() {
            check_one(&meta, Part::Link, daemon_uid).map_err(|p| refuse(&next, Part::Link, p, Some(&meta)))?;
            links += 1;
            if links > MAX_LINKS {
                let problem = Problem::Unreadable(format!("more than {MAX_LINKS} symbolic links"));
                return Err(refuse(&next, Part::Link, problem, Some(&meta)));
            }
            let target = std::fs::read_link(&next)
                .map_err(|e| refuse(&next, Part::Link, Problem::Unreadable(e.to_string()), Some(&meta)))?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            pending.extend(names(&target));
            continue;
        }
        check_one(&meta, what, daemon_uid).map_err(|p| refuse(&next, what, p, Some(&meta)))?;
        at = next;
    }
    Ok(())
}

/// The names of `path` in the order a stack pops them (first name last); `.` dropped, `..` kept.
fn names(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    out.reverse();
    out
}

/// One part's owner and mode. A link's own mode means nothing (it is always 0777): only its
/// owner counts, and only where its directory lets the owner replace it, which a checked
/// directory does not, or does only when sticky.
fn check_one(meta: &std::fs::Metadata, what: Part, daemon_uid: u32) -> Result<(), Problem> {
    if meta.uid() != 0 && meta.uid() != daemon_uid {
        return Err(Problem::Owner);
    }
    let group_or_others_write = meta.mode() & 0o022 != 0;
    let sticky_dir = meta.is_dir() && meta.mode() & 0o1000 != 0;
    if what != Part::Link && group_or_others_write && !sticky_dir {
        return Err(Problem::Writable);
    }
    Ok(())
}
