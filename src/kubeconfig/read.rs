//! Every file a kubeconfig brings read within bounds: the kubeconfig itself (up to
//! [`MAX_KUBECONFIG`]) and the files its context names (certificate authority, client
//! certificate and key, token file; up to [`MAX_NAMED_FILE`]), each refused in one line when it
//! is not a regular file (a FIFO would block for ever, `/dev/zero` never end) or is too large.
//! kube-rs reads them whole, so the certificate and key are read here and handed to it inline;
//! the token file is checked and left to kube-rs, which reads it again each minute as client-go
//! does (a rotated token is followed).

use std::io::Read;
use std::path::Path;

use base64::Engine as _;
use kube::config::Kubeconfig;

/// The largest kubeconfig read: twenty thousand clusters with their CA inline (about 1.5 KiB
/// each) fit; past it a file is no kubeconfig a person keeps.
pub const MAX_KUBECONFIG: u64 = 32 << 20;

/// The largest certificate authority bundle, client certificate, key or token file read:
/// twenty times the system's own CA bundle (about 220 KiB on Debian).
pub const MAX_NAMED_FILE: u64 = 4 << 20;

/// Why one file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadFault {
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("it is over {}, more than {what} holds", size(*.limit))]
    TooLarge { limit: u64, what: &'static str },
    #[error("it is not text: {0}")]
    NotText(&'static str),
}

/// A bound as a message says it: `4 MiB`, or bytes below a mebibyte.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// What a file that is not regular is, for the message.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

/// The bytes of `path`, a regular file of at most `limit` bytes. The type is that of the file
/// opened (a path swapped between a check and the open changes nothing), opened without
/// blocking so that a FIFO is refused rather than waited on, and at most `limit + 1` bytes are
/// read whatever its size said.
pub(crate) fn bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, ReadFault> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadFault::Io)?;
    let metadata = file.metadata().map_err(ReadFault::Io)?;
    if !metadata.is_file() {
        return Err(ReadFault::NotRegular(kind_of(metadata.file_type())));
    }
    let too_large = ReadFault::TooLarge { limit, what };
    if metadata.len() > limit {
        return Err(too_large);
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadFault::Io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large);
    }
    Ok(bytes)
}

/// Checks `path` as [`bounded`] would read it, reading nothing.
pub(crate) fn check(path: &Path, limit: u64, what: &'static str) -> Result<(), ReadFault> {
    let metadata = std::fs::metadata(path).map_err(ReadFault::Io)?;
    if !metadata.is_file() {
        return Err(ReadFault::NotRegular(kind_of(metadata.file_type())));
    }
    if metadata.len() > limit {
        return Err(ReadFault::TooLarge { limit, what });
    }
    Ok(())
}

/// A kubeconfig's text: UTF-8 (a byte order mark dropped) or UTF-16 with its mark, as
/// kubectl's loader (and kube-rs's) takes them.
fn text(bytes: Vec<u8>) -> Result<String, ReadFault> {
    let utf16 = |bytes: &[u8], word: fn([u8; 2]) -> u16| {
        let words: Vec<u16> = bytes
            .chunks(2)
            .map(|pair| word([pair[0], *pair.get(1).unwrap_or(&0)]))
            .collect();
        String::from_utf16(&words).map_err(|_| ReadFault::NotText("invalid UTF-16"))
    };
    match bytes.as_slice() {
        [0xff, 0xfe, rest @ ..] => utf16(rest, u16::from_le_bytes),
        [0xfe, 0xff, rest @ ..] => utf16(rest, u16::from_be_bytes),
        [0xef, 0xbb, 0xbf, rest @ ..] => {
            String::from_utf8(rest.to_vec()).map_err(|_| ReadFault::NotText("invalid UTF-8"))
        }
        _ => String::from_utf8(bytes).map_err(|_| ReadFault::NotText("invalid UTF-8")),
    }
}

/// Why a kubeconfig file could not be taken.
#[derive(Debug)]
pub(crate) enum FileError {
    Read(ReadFault),
    /// Its YAML, on one line.
    Parse(String),
}

/// One kubeconfig file, read within [`MAX_KUBECONFIG`], its documents merged and the paths it
/// names made absolute against its directory (client-go's `ResolveLocalPaths`; an exec
/// command only when it holds a `/`, as `GetAuthInfoFileReferences` has it).
pub(crate) fn kubeconfig(path: &Path) -> Result<Kubeconfig, FileError> {
    let bytes = bounded(path, MAX_KUBECONFIG, "a kubeconfig").map_err(FileError::Read)?;
    let text = text(bytes).map_err(FileError::Read)?;
    let mut config = Kubeconfig::from_yaml(&text)
        .map_err(|e| FileError::Parse(budget_words(&super::one_line(&super::chain(&e)))))?;
    let Some(dir) = path.parent() else {
        return Ok(config);
    };
    let absolute = |file: &mut Option<String>| {
        if let Some(relative) = file.as_deref().filter(|f| Path::new(f).is_relative())
            && let Some(joined) = dir.join(relative).to_str()
        {
            *file = Some(joined.to_owned());
        }
    };
    for cluster in config
        .clusters
        .iter_mut()
        .filter_map(|c| c.cluster.as_mut())
    {
        absolute(&mut cluster.certificate_authority);
    }
    for user in config
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        absolute(&mut user.client_certificate);
        absolute(&mut user.client_key);
        absolute(&mut user.token_file);
        if let Some(exec) = user.exec.as_mut()
            && exec.command.as_deref().is_some_and(|c| c.contains('/'))
        {
            absolute(&mut exec.command);
        }
    }
    Ok(config)
}

/// The YAML reader's budget breach said in words, not as its Rust value (`budget breached:
/// Nodes { nodes: 250001 }`): kube-rs's reader refuses a kubeconfig of more than 250,000 nodes
/// (about fifteen thousand clusters with their contexts and users), and other excesses.
fn budget_words(text: &str) -> String {
    let Some((before, breach)) = text.split_once("budget breached: ") else {
        return text.to_owned();
    };
    let what = breach
        .split([' ', '{'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let count = breach
        .split(|c: char| !c.is_ascii_digit())
        .find(|d| !d.is_empty())
        .and_then(|d| d.parse::<usize>().ok());
    let limit = count.map_or(String::new(), |n| {
        format!(" ({} at most)", n.saturating_sub(1))
    });
    format!("{before}it holds more YAML {what} than kube-rs's kubeconfig reader takes{limit}")
}

/// A file the context names that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{field} {path}: {fault}")]
pub struct NamedFileError {
    /// The kubeconfig's field (`certificate-authority`, `client-key`...).
    pub field: &'static str,
    pub path: String,
    #[source]
    pub fault: ReadFault,
}

/// Reads the files the cluster and user name into their `-data` fields (base64, as a kubeconfig
/// holds them inline), so kube-rs reads none itself; checks the token file. A field whose
/// `-data` is set already is left alone: the data wins, as in client-go.
pub(crate) fn inline_named_files(
    cluster: Option<&mut kube::config::Cluster>,
    user: Option<&mut kube::config::AuthInfo>,
) -> Result<(), NamedFileError> {
    let read = |field: &'static str, path: &str| {
        bounded(Path::new(path), MAX_NAMED_FILE, "a certificate or key file")
            .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
            .map_err(|fault| NamedFileError {
                field,
                path: path.to_owned(),
                fault,
            })
    };
    if let Some(cluster) = cluster
        && cluster.certificate_authority_data.is_none()
        && let Some(path) = cluster.certificate_authority.take()
    {
        cluster.certificate_authority_data = Some(read("certificate-authority", &path)?);
    }
    let Some(user) = user else { return Ok(()) };
    if user.client_certificate_data.is_none()
        && let Some(path) = user.client_certificate.take()
    {
        user.client_certificate_data = Some(read("client-certificate", &path)?);
    }
    if user.client_key_data.is_none()
        && let Some(path) = user.client_key.take()
    {
        user.client_key_data = Some(read("client-key", &path)?.into());
    }
    if user.token.is_none()
        && let Some(path) = &user.token_file
    {
        check(Path::new(path), MAX_NAMED_FILE, "a token file").map_err(|fault| NamedFileError {
            field: "tokenFile",
            path: path.clone(),
            fault,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_bound_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // A FIFO with no writer is refused at once, never waited on.
        let err = bounded(&fifo, 10, "x").unwrap_err();
        assert_eq!(err.to_string(), "it is a FIFO, not a regular file");
        assert_eq!(
            bounded(Path::new("/dev/zero"), 10, "x")
                .unwrap_err()
                .to_string(),
            "it is a character device, not a regular file"
        );
        assert_eq!(
            bounded(dir.path(), 10, "x").unwrap_err().to_string(),
            "it is a directory, not a regular file"
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 11]).unwrap();
        assert_eq!(
            bounded(&big, 10, "a kubeconfig").unwrap_err().to_string(),
            "it is over 10 bytes, more than a kubeconfig holds"
        );
        assert_eq!(bounded(&big, 11, "x").unwrap().len(), 11);
        assert!(check(&fifo, 10, "x").is_err() && check(&big, 11, "x").is_ok());
    }

    #[test]
    fn utf16_and_byte_order_marks_are_read_as_kubectl_reads_them() {
        let yaml = "kind: Config\n";
        let mut le = vec![0xff, 0xfe];
        le.extend(yaml.encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(text(le).unwrap(), yaml);
        let mut bom = vec![0xef, 0xbb, 0xbf];
        bom.extend_from_slice(yaml.as_bytes());
        assert_eq!(text(bom).unwrap(), yaml);
        assert!(text(vec![0xff, 0xff]).is_err());
    }
}
