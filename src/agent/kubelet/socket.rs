//! The life of one unix socket file: bind it (removing a stale file), tell whether the file at its
//! path is still ours (the inode we bound: in a surge rollout the new pod binds the same path while
//! the old one drains), and remove it at shutdown only if so. A deleted directory that is itself a
//! hostPath mount stays visible with a link count of 0 and takes no new file: that is its own case,
//! [`Found::DirectoryDeleted`], not "missing, re-create it".

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
    /// Nothing is there (the file was removed, or its directory, which a re-creation brings back).
    Missing,
    /// The socket's directory was deleted and the path still shows the deleted directory (a
    /// mount of it): a socket can no longer be created where the kubelet looks.
    DirectoryDeleted,
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
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return if path.parent().is_some_and(directory_deleted) {
                Found::DirectoryDeleted
            } else {
                Found::Missing
            };
        }
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

/// Whether `dir` is a directory that has been deleted while its path still leads to it: a
/// deleted directory has no links left (its own `.` and its parent's entry are gone). A path
/// normally stops resolving when its directory is deleted; one that still does goes through a
/// mount of the directory (a container's hostPath mount) or a `/proc/<pid>/fd` link to it.
fn directory_deleted(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|meta| meta.is_dir() && meta.nlink() == 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A deleted directory seen through a path that still resolves, as a container sees a
    /// hostPath-mounted directory that was deleted on the host: `/proc/self/fd/N` of an open
    /// handle behaves as the mount does (the path leads to the dead directory, nothing can be
    /// created in it), without needing a mount namespace in the test.
    #[tokio::test]
    async fn a_deleted_directory_behind_a_mount_is_told_apart_from_a_missing_socket() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("plugins_registry");
        std::fs::create_dir(&dir).unwrap();
        let handle = std::fs::File::open(&dir).unwrap();
        let mounted = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&handle)
        ));
        let path = mounted.join("media.liken.sh-reg.sock");
        let (_listener, ours) = bind(&path).unwrap();
        assert_eq!(inspect(&path, ours).await, Found::Ours);

        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            inspect(&path, ours).await,
            Found::Missing,
            "only the socket is gone"
        );

        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(inspect(&path, ours).await, Found::DirectoryDeleted);
        // Why it is its own case: nothing can be bound there any more.
        assert!(bind(&path).is_err());

        // A directory deleted and re-created at a path that follows it is just "missing".
        std::fs::create_dir(&dir).unwrap();
        let plain = dir.join("media.liken.sh-reg.sock");
        let (_listener, ours) = bind(&plain).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(inspect(&plain, ours).await, Found::Missing);
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(inspect(&plain, ours).await, Found::Missing);
    }
}
