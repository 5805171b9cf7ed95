//! Files that hold secrets (the API token, the cluster key): only their owner may read them,
//! and that owner is root or the daemon's own user, so that nobody else on the node can learn
//! or replace the secret.
use std::{io::Read, os::unix::fs::MetadataExt, path::Path};

/// Why a secret file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("cannot be read")]
    Read(#[source] std::io::Error),
    /// What is wrong with it, as the end of "the FILE is ...".
    #[error("{0}")]
    Refused(String),
}

/// The first `limit` bytes of `path`, which must be a regular file that its group and others
/// cannot read or write, owned by root or by `owner` (the daemon's uid).
pub fn read_private(path: &Path, owner: u32, limit: u64) -> Result<Vec<u8>, SecretFileError> {
    let file = std::fs::File::open(path).map_err(SecretFileError::Read)?;
    let meta = file.metadata().map_err(SecretFileError::Read)?;
    if !meta.is_file() {
        return Err(SecretFileError::Refused("not a regular file".into()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretFileError::Refused(format!(
            "open to its group or others (mode 0{mode:o}): whoever reads it holds the secret; `chmod 600 {}`",
            path.display()
        )));
    }
    if meta.uid() != 0 && meta.uid() != owner {
        return Err(SecretFileError::Refused(format!(
            "owned by uid {}: it must belong to root or to the daemon's user (uid {owner})",
            meta.uid()
        )));
    }
    let mut text = Vec::new();
    file.take(limit).read_to_end(&mut text).map_err(SecretFileError::Read)?;
    Ok(text)
}
