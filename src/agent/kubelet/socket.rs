//! The life of one unix socket file: bind it (removing a stale file first), tell whether the
//! file at its path is still ours, and remove it at shutdown only if it is still ours.
//!
//! "Ours" means the same inode we bound. That matters during a rolling update with surge: the
//! new pod binds a fresh socket at the same path while the old pod is still draining, and the
//! old pod must neither remove nor take back the new pod's socket.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use super::KubeletError;

/// How long a connection attempt to a foreign socket may take before we call it dead.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Identifies one file: device, inode number and change time. The change time is needed
/// because a socket created right after ours was deleted often gets the same inode number.
/// (A chmod or chown of our socket also changes it; we then take our own socket for another
/// process's, which only costs a misleading log line and leaving the file at shutdown.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// What is at a socket's path now, compared with the socket we bound there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// Our socket is still there.
    Ours,
    /// Nothing is there (the file or its directory was removed).
    Missing,
    /// Another socket that nobody listens on: a leftover, safe to replace.
    Dead,
    /// Another socket with a live listener (another instance of the agent): leave it alone.
    Live,
    /// Something we cannot inspect or should not touch (e.g. a permission error, a directory).
    Unknown(String),
}

/// Creates the socket's directory, removes whatever stale file sits at `path` and binds a new
/// listener there.
pub(super) fn bind(path: &Path) -> Result<(UnixListener, FileId), KubeletError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| KubeletError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    remove_stale(path)?;
    let listener = UnixListener::bind(path).map_err(|source| KubeletError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    let meta = std::fs::symlink_metadata(path).map_err(|source| KubeletError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((listener, FileId::of(&meta)))
}

/// Removes a file left at `path` by an earlier run (a socket outlives the process that bound
/// it). A directory is never removed: that is a misconfiguration, not a leftover.
fn remove_stale(path: &Path) -> Result<(), KubeletError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(KubeletError::IsADirectory {
            path: path.to_path_buf(),
        }),
        Ok(_) => std::fs::remove_file(path).map_err(|source| KubeletError::RemoveStale {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(KubeletError::RemoveStale {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Looks at what is at `path` now.
pub(super) async fn inspect(path: &Path, ours: FileId) -> Found {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Found::Missing,
        Err(e) => return Found::Unknown(e.to_string()),
    };
    if FileId::of(&meta) == ours {
        return Found::Ours;
    }
    if !meta.file_type().is_socket() {
        return Found::Unknown("not a socket".to_owned());
    }
    match tokio::time::timeout(PROBE_TIMEOUT, UnixStream::connect(path)).await {
        Ok(Ok(_stream)) => Found::Live,
        // Refused (nobody listens) or too slow to answer: nobody serves the kubelet there.
        Ok(Err(_)) | Err(_) => Found::Dead,
    }
}

/// Removes the socket file at `path` if it is still the one we bound.
pub(super) fn remove_if_ours(path: &PathBuf, ours: FileId) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if FileId::of(&meta) == ours => std::fs::remove_file(path).map(|()| true),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
