//! Reading API objects from files (`-f FILE`, `-f DIR` as kubectl walks it, `-f -`) through the
//! same parser as API responses ([`crate::fleet::objects`]), so a file answers as its cluster.
//!
//! JSON is streamed: a scanner cuts a List's `items` into batches that two threads parse while the
//! next are read; two files are read side by side and merged in the order given. YAML is read
//! whole, up to 128 MiB. Every document must be an object or List with a `kind`; one object given
//! twice is kept once, two different ones under one identity are an error. docs/user-guide.md
//! (`-f`) gives the limits and rules.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::Read;
use std::path::PathBuf;

use serde::Deserialize;

use crate::fleet::objects::{Kind, Objects};

/// The hint of every error about what a file holds.
const HINT: &str = "hint: -f takes the output of `kubectl get ... -o yaml` or `-o json`";

/// The extensions of the files -f reads from a directory, as kubectl's (cli-runtime's
/// `FileExtensions`); a file -f names itself is read whatever its name.
pub const EXTENSIONS: [&str; 3] = ["json", "yaml", "yml"];

/// What -f takes, for the hints of the errors about a path.
const PATH_HINT: &str =
    "hint: -f takes a file, a directory of .json, .yaml or .yml files, or - for standard input";

/// A file that could not be read, or that does not hold Kubernetes objects.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// As kubectl says it (cli-runtime's `Builder.Path`).
    #[error("the path {path:?} does not exist ({PATH_HINT})")]
    NoSuchPath { path: String },
    #[error("the path {path:?} cannot be accessed: {source} ({PATH_HINT})")]
    Inaccessible {
        path: String,
        source: std::io::Error,
    },
    /// A directory -f names holds no file with one of the [`EXTENSIONS`].
    #[error("{dir}: no .json, .yaml or .yml file in this directory{below} (hint: {hint})",
        below = if *.recursive { " or below it" } else { "" },
        hint = if *.recursive {
            "-f reads a directory's files with these extensions; name a file with another one itself"
        } else {
            "-R reads its subdirectories too; -f reads a directory's files with these extensions"
        })]
    NoFilesIn { dir: String, recursive: bool },
    #[error("read {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: {message} ({HINT})")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A NUL byte or bytes that are not UTF-8 in the first block: a binary file.
    #[error("{file}: not a text file (it holds {what}) ({HINT})")]
    NotText { file: String, what: &'static str },
    #[error("{file}: holds no Kubernetes objects: it is empty ({HINT})")]
    Empty { file: String },
    /// A document that is not a Kubernetes object or List.
    #[error(
        "{file}{place}: {what}, not a Kubernetes object or List (an object has apiVersion and kind, a List has items) ({HINT})"
    )]
    NotObjects {
        file: String,
        /// `:line:column`, or empty when the parser gives no place (a YAML document).
        place: String,
        what: String,
    },
    #[error("{file}:{line}:{column}: {what}, which no Kubernetes object is ({HINT})")]
    Pathological {
        file: String,
        line: usize,
        column: usize,
        what: String,
    },
    #[error(
        "{file}: over 128 MiB of YAML, more than -f parses as YAML (hint: save the objects with `kubectl get ... -o json`, which -f reads as a stream)"
    )]
    TooMuchYaml { file: String },
    #[error(
        "{kind} {name:?} is in {first} and in {second} with different content (hint: give one snapshot of the cluster, or several that do not overlap)"
    )]
    Conflict {
        kind: &'static str,
        name: String,
        first: String,
        second: String,
    },
}

/// Where the objects come from: a path, or `-` for standard input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Stdin,
    File(PathBuf),
}

impl Source {
    pub fn parse(arg: &str) -> Source {
        if arg == "-" {
            Source::Stdin
        } else {
            Source::File(PathBuf::from(arg))
        }
    }

    fn display(&self) -> String {
        match self {
            Source::Stdin => "<stdin>".to_string(),
            Source::File(path) => path.display().to_string(),
        }
    }
}

/// The sources `-f` names, in order: `-` is standard input; a file is read whatever its name; a
/// directory gives its files with one of the [`EXTENSIONS`] in name order, and with `recursive`
/// its subdirectories' too, depth first, as kubectl walks them (cli-runtime's
/// `ExpandPathsToFileVisitors`). Files of other names in a directory are passed over, as kubectl
/// passes over them; a directory that gives no file at all is an error, as it is in kubectl. A
/// symbolic link to a directory inside a directory is not followed (Go's walk does not either).
pub(crate) fn sources(args: &[String], recursive: bool) -> Result<Vec<Source>, SnapshotError> {
    let mut sources = Vec::with_capacity(args.len());
    for arg in args {
        let path = match Source::parse(arg) {
            Source::Stdin => {
                sources.push(Source::Stdin);
                continue;
            }
            Source::File(path) => path,
        };
        let metadata = std::fs::metadata(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => SnapshotError::NoSuchPath { path: arg.clone() },
            _ => SnapshotError::Inaccessible {
                path: arg.clone(),
                source,
            },
        })?;
        if !metadata.is_dir() {
            sources.push(Source::File(path));
            continue;
        }
        let before = sources.len();
        walk(&path, recursive, &mut sources)?;
        if sources.len() == before {
            return Err(SnapshotError::NoFilesIn {
                dir: arg.clone(),
                recursive,
            });
        }
    }
    Ok(sources)
}

/// Adds the files of `dir` with one of the [`EXTENSIONS`], in name order, descending into
/// subdirectories when `recursive` (depth first, before the next entry). The directories being
/// read are a stack on the heap, not a recursion: a tree can be as deep as paths allow.
fn walk(
    dir: &std::path::Path,
    recursive: bool,
    sources: &mut Vec<Source>,
) -> Result<(), SnapshotError> {
    let list = |dir: &std::path::Path| {
        let inaccessible = |source| SnapshotError::Inaccessible {
            path: dir.display().to_string(),
            source,
        };
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
            .map_err(inaccessible)?
            .collect::<Result<_, _>>()
            .map_err(inaccessible)?;
        // Reversed, so that popping gives name order.
        entries.sort_by_key(|e| std::cmp::Reverse(e.file_name()));
        Ok::<_, SnapshotError>(entries)
    };
    let mut open = vec![list(dir)?];
    while let Some(entries) = open.last_mut() {
        let Some(entry) = entries.pop() else {
            open.pop();
            continue;
        };
        let path = entry.path();
        // The entry itself, not what a link points to: a linked directory is not walked.
        let is_dir = entry
            .file_type()
            .map_err(|source| SnapshotError::Inaccessible {
                path: path.display().to_string(),
                source,
            })?
            .is_dir();
        if is_dir {
            if recursive {
                open.push(list(&path)?);
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
        {
            sources.push(Source::File(path));
        }
    }
    Ok(())
}

/// Reads every source in order into one set of objects of every kind.
pub(crate) fn read(sources: &[Source], stdin: &mut dyn Read) -> Result<Objects, SnapshotError> {
    let mut objects = Objects::default();
    read_into(&mut objects, sources, stdin)?;
    Ok(objects)
}

/// Reads every source in order into `objects`, keeping the kinds it wants, each object once.
pub(crate) fn read_into(
    objects: &mut Objects,
    sources: &[Source],
    stdin: &mut dyn Read,
) -> Result<(), SnapshotError> {
    let mut seen = Seen::default();
    // What the caller had already counts as the first source.
    let given = std::mem::replace(objects, Objects::wanting(objects.wanted()));
    seen.merge(objects, given, "<given>")?;
    // Files are read two at a time (stdin where it stands), then merged in the order given:
    // a fleet's claims file is parsed while its slices are.
    let wanted = objects.wanted();
    let read_one = |source: &Source, stdin: &mut dyn Read| {
        let mut read = Objects::wanting(wanted);
        read_source(&mut read, source, stdin)?;
        read.note_nameless(&source.display());
        Ok::<_, SnapshotError>(read)
    };
    let files = sources
        .iter()
        .filter(|s| matches!(s, Source::File(_)))
        .count();
    if files < 2 || sources.iter().any(|s| matches!(s, Source::Stdin)) {
        for source in sources {
            let read = read_one(source, &mut *stdin)?;
            seen.merge(objects, read, &source.display())?;
        }
        return Ok(());
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(source) = sources.get(i) else {
                return done;
            };
            // No source is stdin here (see above).
            let read = read_one(source, &mut std::io::empty());
            // A failed file ends this reader; the others finish theirs.
            let failed = read.is_err();
            done.push((i, read));
            if failed {
                return done;
            }
        }
    };
    let mut done = std::thread::scope(|scope| {
        let other = scope.spawn(work);
        let mut done = work();
        match other.join() {
            Ok(more) => done.extend(more),
            Err(panic) => std::panic::resume_unwind(panic),
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    // In order, up to the first failure, as one reader after the other would have.
    for (i, read) in done {
        seen.merge(objects, read?, &sources[i].display())?;
    }
    Ok(())
}

/// Reads one source into `read`, `-` from `stdin`.
fn read_source(
    read: &mut Objects,
    source: &Source,
    stdin: &mut dyn Read,
) -> Result<(), SnapshotError> {
    let name = source.display();
    let read_error = |source| SnapshotError::Read {
        file: name.clone(),
        source,
    };
    match source {
        Source::Stdin => read_stream(read, stdin, &name, None),
        Source::File(path) => {
            let mut file = std::fs::File::open(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => SnapshotError::NoSuchPath { path: name.clone() },
                _ => read_error(e),
            })?;
            let size = file.metadata().ok().map(|m| m.len() as usize);
            read_stream(read, &mut file, &name, size)
        }
    }
}

/// The objects kept so far, by identity, with the source each came from (an index into
/// `sources`: one name per file, not per object).
#[derive(Default)]
struct Seen {
    at: HashMap<(Kind, String, String), (usize, usize), foldhash::fast::RandomState>,
    sources: Vec<String>,
}

impl Seen {
    /// Moves `new` into `objects`, dropping each object already there in the same content, and
    /// failing on one already there in another.
    fn merge(
        &mut self,
        objects: &mut Objects,
        new: Objects,
        source: &str,
    ) -> Result<(), SnapshotError> {
        let Objects {
            slices,
            classes,
            claims,
            allocated,
            claim_templates,
            pods,
            nodes,
            events,
            taint_rules,
            notes,
            unparsed,
            nameless,
            ..
        } = new;
        self.kind(
            &mut objects.slices,
            slices,
            Kind::ResourceSlice,
            source,
            |s| (String::new(), s.metadata.name.clone()),
        )?;
        let meta = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            )
        };
        self.kind(
            &mut objects.classes,
            classes,
            Kind::DeviceClass,
            source,
            |o| meta(&o.metadata),
        )?;
        self.kind(
            &mut objects.claims,
            claims,
            Kind::ResourceClaim,
            source,
            |o| meta(&o.metadata),
        )?;
        // The same claims read for their allocations only (the two never meet in one read).
        self.kind(
            &mut objects.allocated,
            allocated,
            Kind::ResourceClaim,
            source,
            |o| (o.namespace.clone(), o.name.clone()),
        )?;
        self.kind(
            &mut objects.claim_templates,
            claim_templates,
            Kind::ResourceClaimTemplate,
            source,
            |o| meta(&o.metadata),
        )?;
        self.kind(&mut objects.pods, pods, Kind::Pod, source, |o| {
            meta(&o.metadata)
        })?;
        self.kind(&mut objects.nodes, nodes, Kind::Node, source, |o| {
            meta(&o.metadata)
        })?;
        self.kind(&mut objects.events, events, Kind::Event, source, |o| {
            meta(&o.metadata)
        })?;
        self.kind(
            &mut objects.taint_rules,
            taint_rules,
            Kind::DeviceTaintRule,
            source,
            |r| (String::new(), r.metadata.name.clone()),
        )?;
        objects.notes.extend(notes);
        objects.unparsed.extend(unparsed);
        objects.nameless += nameless;
        Ok(())
    }

    fn kind<T: PartialEq>(
        &mut self,
        kept: &mut Vec<T>,
        new: Vec<T>,
        kind: Kind,
        source: &str,
        identity: impl Fn(&T) -> (String, String),
    ) -> Result<(), SnapshotError> {
        kept.reserve(new.len());
        self.at.reserve(new.len());
        if self.sources.last().is_none_or(|last| last != source) {
            self.sources.push(source.to_string());
        }
        let source_index = self.sources.len() - 1;
        for object in new {
            let (namespace, name) = identity(&object);
            // Nameless objects (hand-written, generateName) have no identity to compare.
            if name.is_empty() {
                kept.push(object);
                continue;
            }
            // One hash per object: the entry, not a look-up and then an insert.
            match self.at.entry((kind, namespace, name)) {
                Entry::Occupied(at) if kept[at.get().0] == object => {}
                Entry::Occupied(at) => {
                    let first = self.sources[at.get().1].clone();
                    let (_, namespace, name) = at.remove_entry().0;
                    return Err(SnapshotError::Conflict {
                        kind: kind.name(),
                        name: if namespace.is_empty() {
                            name
                        } else {
                            format!("{namespace}/{name}")
                        },
                        first,
                        second: source.to_string(),
                    });
                }
                Entry::Vacant(at) => {
                    at.insert((kept.len(), source_index));
                    kept.push(object);
                }
            }
        }
        Ok(())
    }
}

/// How much is read at a time.
const BLOCK: usize = 1 << 20;
/// How many bytes of items a parser gets at once.
const BATCH: usize = 1 << 20;
/// Ten times any Kubernetes object: etcd stores at most 1.5 MiB, the API server refuses
/// requests over 3 MiB. A document outside a List's items, or one item, over this is refused
/// before it is held.
const MAX_OBJECT: usize = 16 << 20;
/// YAML is parsed whole (serde_yaml holds a document's events, and the reader a value tree),
/// at several times its size in memory; past this, JSON (read as a stream) is the way.
const MAX_YAML: usize = 128 << 20;
/// serde_json's recursion limit; serde_yaml's is the same.
const MAX_DEPTH: usize = 128;
/// Notes kept per source: a file of a million odd objects must not become a million warnings
/// held in memory; the rest are counted.
const MAX_NOTES: usize = 1000;

/// Threads parsing batches (the reading thread is a third, mostly waiting on them).
const PARSERS: usize = 2;

/// Reads one source: JSON as a stream, YAML whole.
fn read_stream(
    objects: &mut Objects,
    reader: &mut dyn Read,
    name: &str,
    size: Option<usize>,
) -> Result<(), SnapshotError> {
    let read_error = |source| SnapshotError::Read {
        file: name.to_string(),
        source,
    };
    let mut first = Vec::with_capacity(BLOCK);
    fill(reader, &mut first, BLOCK).map_err(read_error)?;
    check_text(&first, name)?;
    let text_start = first.strip_prefix(b"\xef\xbb\xbf").map_or(0, |_| 3);
    match first[text_start..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
    {
        None => Err(SnapshotError::Empty {
            file: name.to_string(),
        }),
        Some(b'[') if table_header(&first[text_start..]) => Err(SnapshotError::NotObjects {
            file: name.to_string(),
            place: String::new(),
            what: TOML.to_string(),
        }),
        Some(b'{' | b'[') => {
            let mut first = first;
            first.drain(..text_start);
            read_json(objects, reader, first, name)
        }
        Some(_) => {
            let mut bytes = first;
            if let Some(size) = size {
                bytes.reserve(size.saturating_sub(bytes.len()));
            }
            first_yaml_line_is_kubernetes(&bytes[text_start..], name)?;
            let mut rest = reader.take((MAX_YAML + 1 - bytes.len().min(MAX_YAML)) as u64);
            rest.read_to_end(&mut bytes).map_err(read_error)?;
            if bytes.len() > MAX_YAML {
                return Err(SnapshotError::TooMuchYaml {
                    file: name.to_string(),
                });
            }
            yaml_nesting(&bytes, name)?;
            let text = String::from_utf8(bytes).map_err(|_| SnapshotError::NotText {
                file: name.to_string(),
                what: "bytes that are not UTF-8",
            })?;
            add_yaml(objects, &text[text_start..], name)
        }
    }
}

/// Reads until `buf` holds `want` bytes or the input ends.
fn fill(reader: &mut dyn Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<usize> {
    let start = buf.len();
    let mut chunk = reader.take(want as u64);
    chunk.read_to_end(buf)?;
    Ok(buf.len() - start)
}

/// Binary input is refused from its first block: a NUL, or bytes that are not UTF-8 (a
/// character cut by the block's end is fine).
fn check_text(block: &[u8], name: &str) -> Result<(), SnapshotError> {
    let not_text = |what| SnapshotError::NotText {
        file: name.to_string(),
        what,
    };
    if block.contains(&0) {
        return Err(not_text("a NUL byte"));
    }
    match std::str::from_utf8(block) {
        Ok(_) => Ok(()),
        Err(e) if e.error_len().is_none() => Ok(()),
        Err(_) => Err(not_text("bytes that are not UTF-8")),
    }
}

/// What a TOML or INI file is called.
const TOML: &str = "a TOML or INI file (a [table] header)";

/// Whether the first line of `bytes` is a TOML or INI table header (see [`table_header_line`]).
fn table_header(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]);
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(table_header_line)
}

/// Whether `line` is a TOML or INI table header (`[package]`, `[[bin]]`, `[a.b]`) rather than
/// the start of a JSON array, which never has a bare word but `true`, `false` or `null` after
/// its `[`.
fn table_header_line(line: &str) -> bool {
    let line = line.split_once('#').map_or(line, |(code, _)| code).trim();
    let inner = line
        .strip_prefix("[[")
        .and_then(|l| l.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')));
    inner.is_some_and(|name| {
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            && !matches!(name, "true" | "false" | "null")
    })
}

/// A Kubernetes YAML document starts with a mapping key (`apiVersion:`, `items:`...) after
/// comments, directives and `---`; plain words, a scalar or a sequence are refused before the
/// rest is read.
fn first_yaml_line_is_kubernetes(bytes: &[u8], name: &str) -> Result<(), SnapshotError> {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed.starts_with('%')
            || trimmed == "---"
            || trimmed == "..."
        {
            continue;
        }
        let content = trimmed.strip_prefix("--- ").unwrap_or(trimmed);
        let is_key = content.split_once(':').is_some_and(|(key, rest)| {
            !key.is_empty() && !key.contains(' ') && (rest.is_empty() || rest.starts_with(' '))
        });
        if is_key {
            return Ok(());
        }
        let what = if content.starts_with('-') {
            "a YAML sequence".to_string()
        } else if table_header_line(content) {
            TOML.to_string()
        } else {
            "plain text".to_string()
        };
        return Err(SnapshotError::NotObjects {
            file: name.to_string(),
            place: format!(":{}:{}", i + 1, line.len() - line.trim_start().len() + 1),
            what,
        });
    }
    Ok(())
}

/// Flow collections nested past serde_yaml's recursion limit are refused before serde_yaml
/// sees them ([`crate::text::flow_nesting_over`] says why).
fn yaml_nesting(bytes: &[u8], name: &str) -> Result<(), SnapshotError> {
    match crate::text::flow_nesting_over(bytes, MAX_DEPTH) {
        None => Ok(()),
        Some(at) => Err(SnapshotError::Pathological {
            file: name.to_string(),
            line: at.line,
            column: at.column,
            what: "nesting deeper than 128 levels".to_string(),
        }),
    }
}

/// The YAML documents of one text, each a Kubernetes object or List.
fn add_yaml(objects: &mut Objects, text: &str, name: &str) -> Result<(), SnapshotError> {
    let mut any = false;
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_json::Value::deserialize(document).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            SnapshotError::Syntax {
                file: name.to_string(),
                line,
                column,
                message: strip_location(&e.to_string()),
            }
        })?;
        // As the JSON reader rules (and kubectl: "Object 'Kind' is missing"): an object says its
        // kind, or is a List whose items do or whose kind gives theirs (`kind: PodList`).
        let what = match &value {
            serde_json::Value::Null => continue,
            // kubectl's "Object 'Kind' is missing": a mapping with `items` but no kind is some
            // other file's list, not an empty fleet.
            serde_json::Value::Object(map)
                if map.contains_key("items") && !map.contains_key("kind") =>
            {
                Some("a mapping with items but no kind")
            }
            serde_json::Value::Object(map) => match map.get("items") {
                Some(serde_json::Value::Array(items))
                    if crate::fleet::objects::list_item_kind(
                        map.get("kind").and_then(|k| k.as_str()),
                    )
                    .is_none()
                        && items.iter().any(|item| item.get("kind").is_none()) =>
                {
                    Some("a List with an item without a kind")
                }
                Some(_) => None,
                None if map.contains_key("kind") => None,
                None => Some("a mapping without kind or items"),
            },
            serde_json::Value::Array(_) => Some("a YAML sequence"),
            _ => Some("a scalar"),
        };
        if let Some(what) = what {
            return Err(SnapshotError::NotObjects {
                file: name.to_string(),
                place: String::new(),
                what: format!("YAML document {} is {what}", i + 1),
            });
        }
        any = true;
        objects.add_value(&value);
    }
    if any {
        Ok(())
    } else {
        Err(SnapshotError::Empty {
            file: name.to_string(),
        })
    }
}

/// Adds the objects of one file's text, JSON or YAML, as `-f` reads it.
pub fn add_text(objects: &mut Objects, text: &str, name: &str) -> Result<(), SnapshotError> {
    read_stream(objects, &mut text.as_bytes(), name, Some(text.len()))
}

/// Where a byte is, 1-based, as serde_json counts lines and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    line: usize,
    column: usize,
}

/// A unit of parsing, in the order of the file.
enum Work {
    /// Whole items of a List, back to back, each with its offset and position, and the List's
    /// kind and apiVersion as known when its items began.
    Items {
        text: Vec<u8>,
        starts: Vec<(usize, Position)>,
        kind: Option<String>,
        api_version: Option<String>,
    },
    /// A top-level object with its List's items cut out: a single object, or a List's head.
    Document {
        text: Vec<u8>,
        start: Position,
        list: bool,
    },
}

/// What a [`Work`] came to.
enum Parsed {
    Items {
        objects: Objects,
        /// The texts of items with no kind while the List's is unknown, with their places.
        late: Vec<(String, Position)>,
        /// Of those, the ones without a name as well (`{}`): counted, with the first's place.
        late_nameless: (usize, Option<Position>),
    },
    Document {
        objects: Objects,
        kubernetes: bool,
        /// Whether the document has `items`.
        list: bool,
        start: Position,
        kind: Option<String>,
        api_version: Option<String>,
    },
}

/// A List's `kind` and `apiVersion`, the rest passed over.
#[derive(Default, Deserialize)]
struct ListKind {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
}

fn syntax(name: &str, e: &serde_json::Error, start: Position) -> SnapshotError {
    // serde_json counts from the start of the text it was given.
    let (line, column) = match e.line() {
        0 => (start.line, start.column),
        1 => (start.line, start.column + e.column().saturating_sub(1)),
        l => (start.line + l - 1, e.column()),
    };
    SnapshotError::Syntax {
        file: name.to_string(),
        line,
        column,
        message: strip_location(&e.to_string()),
    }
}

/// A List's item with no kind of its own in a List whose kind gives none (`kind: List`, as
/// kubectl writes, or no kind at all).
fn kindless_item(name: &str, start: Position) -> SnapshotError {
    SnapshotError::NotObjects {
        file: name.to_string(),
        place: format!(":{}:{}", start.line, start.column),
        what: "an item of a List without a kind".to_string(),
    }
}

fn utf8<'a>(name: &str, bytes: &'a [u8], start: Position) -> Result<&'a str, SnapshotError> {
    std::str::from_utf8(bytes).map_err(|_| SnapshotError::Syntax {
        file: name.to_string(),
        line: start.line,
        column: start.column,
        message: "bytes that are not UTF-8 in this object".to_string(),
    })
}

fn parse(work: &Work, wanted: Objects, name: &str) -> Result<Parsed, SnapshotError> {
    let mut objects = wanted;
    match work {
        Work::Items {
            text,
            starts,
            kind,
            api_version,
        } => {
            let mut late = Vec::new();
            let mut late_nameless = (0, None);
            for (i, &(offset, start)) in starts.iter().enumerate() {
                let end = starts.get(i + 1).map_or(text.len(), |next| next.0);
                let item = utf8(name, &text[offset..end], start)?;
                let Some(fields) = objects
                    .add_list_item(item, kind.as_deref(), api_version.as_deref())
                    .map_err(|e| syntax(name, &e, start))?
                else {
                    continue;
                };
                if kind.is_some() {
                    return Err(kindless_item(name, start));
                }
                // Whatever kind the List gives it, an item without a name is passed over: a
                // million `{}` before the List's kind cost a count, not their texts.
                let named = fields
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(|n| n.as_str())
                    .is_some_and(|n| !n.is_empty());
                if named {
                    late.push((item.to_string(), start));
                } else {
                    late_nameless.0 += 1;
                    late_nameless.1.get_or_insert(start);
                }
            }
            Ok(Parsed::Items {
                objects,
                late,
                late_nameless,
            })
        }
        &Work::Document {
            ref text,
            start,
            list,
        } => {
            let document = utf8(name, text, start)?;
            let kubernetes = objects
                .add_json_document(document)
                .map_err(|e| syntax(name, &e, start))?;
            let head: ListKind = if list {
                serde_json::from_str(document).unwrap_or_default()
            } else {
                ListKind::default()
            };
            // A List without a kind is some other file's list (kubectl: "Object 'Kind' is
            // missing"), not an empty fleet.
            let kubernetes = kubernetes && !(list && head.kind.is_none());
            Ok(Parsed::Document {
                objects,
                kubernetes,
                list,
                start,
                kind: head.kind,
                api_version: head.api_version,
            })
        }
    }
}

/// Puts parsed work back in the file's order.
struct Merger<'a> {
    objects: &'a mut Objects,
    /// The objects merged so far by identity: one object given a million times in a file is
    /// held once, batch by batch, not a million times until the file ends.
    seen: Seen,
    name: &'a str,
    next: usize,
    pending: std::collections::BTreeMap<usize, Result<Parsed, SnapshotError>>,
    /// Items of the current List that carried no kind while the List's was unknown, and their
    /// size: held until the List's kind comes, so bounded by [`MAX_OBJECT`] in all.
    late: Vec<(String, Position)>,
    late_bytes: usize,
    /// Items of the current List without a kind or a name: how many, and the first's place.
    late_nameless: (usize, Option<Position>),
    /// Where this source's notes begin, and how many past [`MAX_NOTES`] were dropped.
    notes_before: usize,
    notes_dropped: usize,
    /// Whether any parser failed (reading stops).
    failed: bool,
    /// The first failure in the file's order.
    error: Option<SnapshotError>,
}

impl Merger<'_> {
    /// Takes one result; merges what is next in order. The first error in order is kept, and
    /// nothing after it is merged.
    fn add(&mut self, index: usize, parsed: Result<Parsed, SnapshotError>) {
        self.failed |= parsed.is_err();
        self.pending.insert(index, parsed);
        while self.error.is_none()
            && let Some(parsed) = self.pending.remove(&self.next)
        {
            self.next += 1;
            if let Err(e) = self.merge(parsed) {
                self.error = Some(e);
                self.failed = true;
            }
        }
    }

    fn cap_notes(&mut self) {
        let notes = &mut self.objects.notes;
        if notes.len() > self.notes_before + MAX_NOTES {
            self.notes_dropped += notes.len() - (self.notes_before + MAX_NOTES);
            notes.truncate(self.notes_before + MAX_NOTES);
        }
    }

    /// The count of the notes not kept, as one more note.
    fn finish(self) -> Option<SnapshotError> {
        if self.notes_dropped > 0 {
            self.objects.notes.push(format!(
                "{}: {} more objects skipped (only the first {MAX_NOTES} are named)",
                self.name, self.notes_dropped
            ));
        }
        self.error
    }

    fn merge(&mut self, parsed: Result<Parsed, SnapshotError>) -> Result<(), SnapshotError> {
        match parsed? {
            Parsed::Items {
                objects,
                late,
                late_nameless,
            } => {
                self.late_nameless.0 += late_nameless.0;
                if self.late_nameless.1.is_none() {
                    self.late_nameless.1 = late_nameless.1;
                }
                self.seen.merge(self.objects, objects, self.name)?;
                self.cap_notes();
                for (text, start) in late {
                    self.late_bytes += text.len();
                    if self.late_bytes > MAX_OBJECT {
                        return Err(SnapshotError::Pathological {
                            file: self.name.to_string(),
                            line: start.line,
                            column: start.column,
                            what: "over 16 MiB of List items without a kind before the List's own kind"
                                .to_string(),
                        });
                    }
                    self.late.push((text, start));
                }
            }
            Parsed::Document {
                objects,
                kubernetes,
                list,
                start,
                kind,
                api_version,
            } => {
                if !kubernetes {
                    return Err(SnapshotError::NotObjects {
                        file: self.name.to_string(),
                        place: format!(":{}:{}", start.line, start.column),
                        what: if list {
                            "a JSON object with items but no kind"
                        } else {
                            "a JSON object without kind or items"
                        }
                        .to_string(),
                    });
                }
                self.seen.merge(self.objects, objects, self.name)?;
                self.cap_notes();
                self.late_bytes = 0;
                let (nameless, first) = std::mem::take(&mut self.late_nameless);
                if let Some(first) = first {
                    // Their List gives them no kind: they are no objects at all.
                    if crate::fleet::objects::list_item_kind(kind.as_deref()).is_none() {
                        return Err(kindless_item(self.name, first));
                    }
                    self.objects.nameless += nameless;
                }
                for (item, start) in std::mem::take(&mut self.late) {
                    if !self
                        .objects
                        .add_late_item(&item, kind.as_deref(), api_version.as_deref())
                        .map_err(|e| syntax(self.name, &e, start))?
                    {
                        return Err(kindless_item(self.name, start));
                    }
                }
                self.cap_notes();
            }
        }
        Ok(())
    }
}

/// Reads a JSON source as a stream: the scanner cuts it into [`Work`] on this thread, parsers
/// parse it on theirs, and the results are merged in order.
fn read_json(
    objects: &mut Objects,
    reader: &mut dyn Read,
    first: Vec<u8>,
    name: &str,
) -> Result<(), SnapshotError> {
    let wanted = objects.wanted();
    let (work_tx, work_rx) = std::sync::mpsc::sync_channel::<(usize, Work)>(PARSERS);
    let work_rx = std::sync::Mutex::new(work_rx);
    // Batch buffers go back to the scanner: a fresh megabyte per batch was a page fault per
    // 4 KiB, a third of all of them.
    let (spare_tx, spare_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(PARSERS + 1);
    std::thread::scope(|scope| {
        let (done_tx, done_rx) =
            std::sync::mpsc::channel::<(usize, Result<Parsed, SnapshotError>)>();
        for _ in 0..PARSERS {
            let work_rx = &work_rx;
            let done_tx = done_tx.clone();
            let spare_tx = spare_tx.clone();
            scope.spawn(move || {
                loop {
                    let next = match work_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => break,
                    };
                    let Ok((index, work)) = next else { break };
                    let parsed = parse(&work, Objects::wanting(wanted), name);
                    if let Work::Items { text, .. } = work {
                        // Back to the scanner; dropped when it has enough.
                        let _ = spare_tx.try_send(text);
                    }
                    if done_tx.send((index, parsed)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done_tx);
        let notes_before = objects.notes.len();
        let mut merger = Merger {
            notes_before,
            notes_dropped: 0,
            objects,
            seen: Seen::default(),
            name,
            next: 0,
            pending: std::collections::BTreeMap::new(),
            late: Vec::new(),
            late_bytes: 0,
            late_nameless: (0, None),
            failed: false,
            error: None,
        };
        let mut sent = 0;
        let mut emit = |work: Work| {
            let ok = work_tx.send((sent, work)).is_ok();
            sent += 1;
            ok
        };
        let mut scanner = Scanner::new(name);
        scanner.spares = Some(spare_rx);
        let mut scanned = scanner.feed(&first, &mut emit);
        drop(first);
        let mut block = Vec::with_capacity(BLOCK);
        while scanned.is_ok() {
            // A parser's error stops the reading (which error comes first is decided below).
            while let Ok((index, parsed)) = done_rx.try_recv() {
                merger.add(index, parsed);
            }
            if merger.failed {
                break;
            }
            block.clear();
            match fill(reader, &mut block, BLOCK) {
                Ok(0) => {
                    scanned = scanner.finish(&mut emit);
                    break;
                }
                Ok(_) => scanned = scanner.feed(&block, &mut emit),
                Err(source) => {
                    scanned = Err(SnapshotError::Read {
                        file: name.to_string(),
                        source,
                    })
                }
            }
        }
        drop(work_tx);
        for (index, parsed) in done_rx {
            merger.add(index, parsed);
        }
        // Errors in file order: a parser's about earlier bytes, then the scanner's.
        match (merger.finish(), scanned) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(()),
        }
    })
}

/// The bytes the scanner acts on inside a value (below an item's or a document's top level).
const INSIDE_A_VALUE: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 6 {
        table[b"\"{}[]\n"[i] as usize] = true;
        i += 1;
    }
    table
};

/// What the scanner copies the bytes it passes into.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Copy {
    Nothing,
    Head,
    Item,
}

/// Cuts JSON into [`Work`], knowing just enough of its structure: strings, nesting, the keys of
/// top-level objects, and the items of an `items` array.
struct Scanner<'n> {
    name: &'n str,
    line: usize,
    column: usize,
    depth: usize,
    /// The brackets open, innermost last (at most [`MAX_DEPTH`]).
    open: Vec<u8>,
    string: bool,
    escape: bool,
    copy: Copy,
    head: Vec<u8>,
    head_start: Position,
    list: bool,
    key: Vec<u8>,
    in_key: bool,
    expect_key: bool,
    items_next: bool,
    in_items: bool,
    list_kind: ListKind,
    batch: Vec<u8>,
    starts: Vec<(usize, Position)>,
    /// Buffers of batches parsed, to fill again.
    spares: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
}

impl<'n> Scanner<'n> {
    fn new(name: &'n str) -> Self {
        Scanner {
            name,
            line: 1,
            column: 1,
            depth: 0,
            open: Vec::with_capacity(MAX_DEPTH),
            string: false,
            escape: false,
            copy: Copy::Nothing,
            head: Vec::new(),
            head_start: Position { line: 1, column: 1 },
            list: false,
            key: Vec::new(),
            in_key: false,
            expect_key: false,
            items_next: false,
            in_items: false,
            list_kind: ListKind::default(),
            batch: Vec::with_capacity(BATCH + (BATCH >> 2)),
            starts: Vec::new(),
            spares: None,
        }
    }

    fn position(&self) -> Position {
        Position {
            line: self.line,
            column: self.column,
        }
    }

    fn refuse(&self, what: &str) -> SnapshotError {
        SnapshotError::NotObjects {
            file: self.name.to_string(),
            place: format!(":{}:{}", self.line, self.column),
            what: what.to_string(),
        }
    }

    fn pathological(&self, what: &str) -> SnapshotError {
        SnapshotError::Pathological {
            file: self.name.to_string(),
            line: self.line,
            column: self.column,
            what: what.to_string(),
        }
    }

    /// Copies `bytes` where the current mode says, refusing an object past [`MAX_OBJECT`].
    fn copy(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        match self.copy {
            Copy::Nothing => {}
            // Checked before the bytes are held, so the bound is the memory's too.
            Copy::Head => {
                if self.head.len() + bytes.len() > MAX_OBJECT {
                    return Err(self.pathological("an object over 16 MiB outside a List's items"));
                }
                self.head.extend_from_slice(bytes);
            }
            Copy::Item => {
                let start = self.starts.last().map_or(0, |s| s.0);
                if self.batch.len() + bytes.len() - start > MAX_OBJECT {
                    return Err(self.pathological("an item over 16 MiB"));
                }
                self.batch.extend_from_slice(bytes);
            }
        }
        Ok(())
    }

    fn send_batch(&mut self, emit: &mut dyn FnMut(Work) -> bool) {
        if self.starts.is_empty() {
            return;
        }
        let next = match self.spares.as_ref().and_then(|s| s.try_recv().ok()) {
            Some(mut spare) => {
                spare.clear();
                spare
            }
            None => Vec::with_capacity(BATCH + (BATCH >> 2)),
        };
        let text = std::mem::replace(&mut self.batch, next);
        emit(Work::Items {
            text,
            starts: std::mem::take(&mut self.starts),
            kind: self.list_kind.kind.clone(),
            api_version: self.list_kind.api_version.clone(),
        });
    }

    /// Inside a JSON string: consumes `rest` up to and including the string's closing quote, or
    /// all of it; returns how many bytes that was (at least one: `rest` is never empty).
    #[inline]
    fn in_string(&mut self, rest: &[u8]) -> usize {
        if self.escape {
            self.escape = false;
            if self.in_key {
                self.key.push(rest[0]);
            }
            self.column += 1;
            return 1;
        }
        let Some(k) = memchr::memchr2(b'"', b'\\', rest) else {
            if self.in_key {
                self.key.extend_from_slice(rest);
            }
            self.column += rest.len();
            return rest.len();
        };
        if self.in_key {
            self.key.extend_from_slice(&rest[..k]);
        }
        self.column += k + 1;
        if rest[k] == b'\\' {
            if self.in_key {
                self.key.push(b'\\');
            }
            self.escape = true;
        } else {
            self.string = false;
            if self.in_key {
                self.in_key = false;
                self.items_next = self.key == b"items";
            }
        }
        k + 1
    }

    fn feed(
        &mut self,
        block: &[u8],
        emit: &mut dyn FnMut(Work) -> bool,
    ) -> Result<(), SnapshotError> {
        let mut span = 0;
        let mut i = 0;
        while i < block.len() {
            if self.string {
                i += self.in_string(&block[i..]);
                continue;
            }
            if self.depth >= 2 && !(self.in_items && self.depth == 2) {
                // Inside a value, only strings, brackets and lines matter: the rest (spaces,
                // commas, numbers, literals) is passed in one go, not byte by byte.
                let skip = block[i..]
                    .iter()
                    .position(|&b| INSIDE_A_VALUE[usize::from(b)])
                    .unwrap_or(block.len() - i);
                self.column += skip;
                i += skip;
                if i == block.len() {
                    break;
                }
            }
            let b = block[i];
            match b {
                b'\n' => {
                    self.line += 1;
                    self.column = 1;
                    i += 1;
                    continue;
                }
                b' ' | b'\t' | b'\r' => {}
                b'"' => {
                    if self.depth == 0 {
                        return Err(self.refuse("a JSON string"));
                    }
                    if self.in_items && self.depth == 2 {
                        return Err(self.refuse("an item of a List that is a string"));
                    }
                    self.string = true;
                    if self.depth == 1 && self.expect_key {
                        self.in_key = true;
                        self.expect_key = false;
                        self.key.clear();
                    } else if self.depth == 1 {
                        self.items_next = false;
                    }
                }
                b'{' | b'[' => {
                    if self.depth == 0 {
                        if b == b'[' {
                            return Err(self.refuse("a JSON array"));
                        }
                        self.copy(&block[span..i])?;
                        span = i;
                        self.copy = Copy::Head;
                        self.head.clear();
                        self.head_start = self.position();
                        self.list = false;
                        self.expect_key = true;
                        self.list_kind = ListKind::default();
                    } else if self.depth == 1 && self.items_next && b == b'[' {
                        // The items begin: the head keeps `[`, the items go to batches.
                        self.copy(&block[span..=i])?;
                        span = i + 1;
                        self.copy = Copy::Nothing;
                        self.in_items = true;
                        self.list = true;
                        self.items_next = false;
                        let mut so_far = self.head.clone();
                        so_far.extend_from_slice(b"]}");
                        self.list_kind = serde_json::from_slice(&so_far).unwrap_or_default();
                    } else if self.in_items && self.depth == 2 {
                        if b == b'[' {
                            return Err(self.refuse("an item of a List that is an array"));
                        }
                        self.copy(&block[span..i])?;
                        span = i;
                        self.copy = Copy::Item;
                        let start = (self.batch.len(), self.position());
                        self.starts.push(start);
                    } else if self.depth == 1 {
                        self.items_next = false;
                    }
                    self.depth += 1;
                    if self.depth > MAX_DEPTH {
                        return Err(self.pathological("nesting deeper than 128 levels"));
                    }
                    self.open.push(b);
                }
                b'}' | b']' => {
                    if self.depth == 0 {
                        return Err(self.refuse("a closing bracket with nothing open"));
                    }
                    let opened = self.open.pop().unwrap_or_default();
                    if (opened, b) != (b'{', b'}') && (opened, b) != (b'[', b']') {
                        return Err(SnapshotError::Syntax {
                            file: self.name.to_string(),
                            line: self.line,
                            column: self.column,
                            message: format!(
                                "mismatched brackets: '{}' closes a '{}'",
                                b as char, opened as char
                            ),
                        });
                    }
                    self.depth -= 1;
                    if self.in_items && self.depth == 2 && self.copy == Copy::Item {
                        self.copy(&block[span..=i])?;
                        span = i + 1;
                        self.copy = Copy::Nothing;
                        if self.batch.len() >= BATCH {
                            self.send_batch(emit);
                        }
                    } else if self.in_items && self.depth == 1 {
                        self.in_items = false;
                        self.send_batch(emit);
                        span = i;
                        self.copy = Copy::Head;
                    } else if self.depth == 0 {
                        self.copy(&block[span..=i])?;
                        span = i + 1;
                        self.copy = Copy::Nothing;
                        emit(Work::Document {
                            text: std::mem::take(&mut self.head),
                            start: self.head_start,
                            list: self.list,
                        });
                    }
                }
                b',' if self.depth == 1 => self.expect_key = true,
                b':' if self.depth == 1 => {}
                b',' if self.in_items && self.depth == 2 => {}
                _ => {
                    if self.depth == 0 {
                        return Err(self.refuse(if b.is_ascii_digit() || b == b'-' {
                            "a JSON number"
                        } else {
                            "text that is not JSON"
                        }));
                    }
                    if self.in_items && self.depth == 2 {
                        return Err(self.refuse("an item of a List that is not an object"));
                    }
                    if self.depth == 1 {
                        self.items_next = false;
                    }
                }
            }
            self.column += 1;
            i += 1;
        }
        self.copy(&block[span..])
    }

    /// The end of the input: what is still open is handed over, for the parser to say where
    /// it ends too soon.
    fn finish(&mut self, emit: &mut dyn FnMut(Work) -> bool) -> Result<(), SnapshotError> {
        if self.copy == Copy::Item {
            self.send_batch(emit);
        }
        if self.depth > 0 {
            emit(Work::Document {
                text: std::mem::take(&mut self.head),
                start: self.head_start,
                list: self.list,
            });
        }
        Ok(())
    }
}

/// serde_json and serde_yaml put " at line L column C" in their messages; we print the
/// location up front instead.
fn strip_location(message: &str) -> String {
    let Some(start) = message.find(" at line ") else {
        return message.to_string();
    };
    let rest = &message[start + " at line ".len()..];
    // Skip "L column C" (digits, the word, digits).
    let after_line = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    let after_column = after_line
        .strip_prefix(" column ")
        .map(|r| r.trim_start_matches(|c: char| c.is_ascii_digit()))
        .unwrap_or(after_line);
    format!("{}{}", &message[..start], after_column)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree 1,000 directories deep is walked depth first in name order, on a thread whose
    /// stack a recursion per level would overflow.
    #[test]
    fn a_deep_tree_is_walked_without_recursion() {
        let root = tempfile::tempdir().unwrap();
        let mut dir = root.path().to_path_buf();
        for _ in 0..1000 {
            std::fs::write(dir.join("b.yaml"), "").unwrap();
            dir.push("a");
            std::fs::create_dir(&dir).unwrap();
        }
        std::fs::write(dir.join("deepest.json"), "").unwrap();
        let arg = root.path().display().to_string();
        let found = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || sources(&[arg], true).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(found.len(), 1001);
        // Depth first: the subdirectory `a` before its sibling `b.yaml`.
        assert_eq!(found[0], Source::File(dir.join("deepest.json")));
        assert_eq!(found[1000], Source::File(root.path().join("b.yaml")));
    }

    const YAML: &str = "\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: a
spec:
  driver: media.liken.sh
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: pci-0000-00-02-0
    attributes:
      decodeVP9: {bool: true}
---
apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: b}
  spec: {driver: liken.sh, nodeName: node-a, pool: {name: node-a, generation: 1}}
";

    #[test]
    fn reads_multi_document_yaml_and_lists() {
        let mut objects = Objects::default();
        add_text(&mut objects, YAML, "f.yaml").unwrap();
        let names: Vec<&str> = objects
            .slices
            .iter()
            .map(|s| s.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn json_and_yaml_give_the_same_objects() {
        let mut from_yaml = Objects::default();
        add_text(&mut from_yaml, YAML, "f.yaml").unwrap();
        let mut json = String::new();
        for doc in serde_yaml::Deserializer::from_str(YAML) {
            json.push_str(&serde_json::Value::deserialize(doc).unwrap().to_string());
            json.push('\n');
        }
        let mut from_json = Objects::default();
        add_text(&mut from_json, &json, "f.json").unwrap();
        assert_eq!(from_yaml.slices, from_json.slices);
    }

    #[test]
    fn syntax_errors_name_the_file_and_place() {
        let mut objects = Objects::default();
        let err = add_text(&mut objects, "kind: ResourceSlice\nspec: [\n", "bad.yaml").unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("bad.yaml:"), "{message}");
        assert!(message.contains("hint: -f takes"), "{message}");
        let err = add_text(
            &mut objects,
            "{\"kind\": \"ResourceSlice\",\n \"spec\": }",
            "bad.json",
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("bad.json:2:10: expected value"),
            "{err}"
        );
    }

    #[test]
    fn locations_are_not_repeated() {
        assert_eq!(
            strip_location("expected value at line 2 column 10"),
            "expected value"
        );
        assert_eq!(
            strip_location(
                "did not find expected ',' at line 5 column 1, while parsing a flow mapping"
            ),
            "did not find expected ',', while parsing a flow mapping"
        );
        assert_eq!(strip_location("no location"), "no location");
    }

    #[test]
    fn files_read_side_by_side_merge_and_fail_in_the_order_given() {
        // Six files, f0.json to f5.json, those at `failing` cut short.
        let read_six = |failing: &[u32]| {
            let texts: Vec<(String, String)> = (0..6)
                .map(|i| {
                    let text = if failing.contains(&i) {
                        "{\"kind\": \"List\", \"items\": [".to_owned()
                    } else {
                        slice(&format!("s{i}"), 1)
                    };
                    (format!("f{i}.json"), text)
                })
                .collect();
            let named: Vec<(&str, &str)> = texts
                .iter()
                .map(|(n, t)| (n.as_str(), t.as_str()))
                .collect();
            let (_dir, sources) = files_with(&named);
            read(&sources, &mut std::io::empty())
        };
        // The first failure in the order given is the one said, whichever thread read it.
        for failing in [[1, 3], [0, 4], [4, 2]] {
            let err = read_six(&failing).unwrap_err();
            let first = failing.iter().min().unwrap();
            assert!(
                err.to_string().contains(&format!("f{first}.json")),
                "{failing:?}: {err}"
            );
        }
        // Without a failure every object is there, in the order given.
        let objects = read_six(&[]).unwrap();
        assert_eq!(slice_names(&objects), ["s0", "s1", "s2", "s3", "s4", "s5"]);
    }

    #[test]
    fn a_missing_file_is_named_as_kubectl_names_it() {
        let expected = "the path \"/nonexistent/fleet.yaml\" does not exist (hint: -f takes a \
            file, a directory of .json, .yaml or .yml files, or - for standard input)";
        let err = sources(&["/nonexistent/fleet.yaml".into()], false).unwrap_err();
        assert_eq!(err.to_string(), expected);
        // And when it goes between the listing and the reading.
        let err = read(
            &[Source::parse("/nonexistent/fleet.yaml")],
            &mut std::io::empty(),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), expected);
    }

    #[test]
    fn a_directory_gives_its_json_and_yaml_files_as_kubectl_walks_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in [
            "b.yaml",
            "a.json",
            "c.yml",
            "notes.txt",
            "README",
            "sub/d.yaml",
            "sub/deep/e.json",
        ] {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
        std::fs::create_dir(root.join("a-dir")).unwrap();
        std::fs::write(root.join("a-dir/z.yaml"), "").unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("linked")).unwrap();
        let names = |recursive: bool| -> Vec<String> {
            sources(&[root.display().to_string()], recursive)
                .unwrap()
                .into_iter()
                .map(|s| match s {
                    Source::File(p) => p.strip_prefix(root).unwrap().display().to_string(),
                    Source::Stdin => "-".into(),
                })
                .collect()
        };
        // Name order, other extensions passed over, subdirectories only with -R (depth first,
        // in their place by name), a linked directory never.
        assert_eq!(names(false), ["a.json", "b.yaml", "c.yml"]);
        assert_eq!(
            names(true),
            [
                "a-dir/z.yaml",
                "a.json",
                "b.yaml",
                "c.yml",
                "sub/d.yaml",
                "sub/deep/e.json"
            ]
        );
        // A file named itself is read whatever its extension; stdin stays where it is given.
        let notes = root.join("notes.txt").display().to_string();
        assert_eq!(
            sources(&[notes.clone(), "-".into()], false).unwrap(),
            [Source::File(notes.into()), Source::Stdin]
        );
    }

    #[test]
    fn a_directory_without_such_files_is_an_error_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.yaml"), "").unwrap();
        let arg = dir.path().display().to_string();
        assert_eq!(
            sources(std::slice::from_ref(&arg), false)
                .unwrap_err()
                .to_string(),
            format!(
                "{arg}: no .json, .yaml or .yml file in this directory (hint: -R reads its \
                 subdirectories too; -f reads a directory's files with these extensions)"
            )
        );
        std::fs::remove_file(dir.path().join("sub/a.yaml")).unwrap();
        assert_eq!(
            sources(std::slice::from_ref(&arg), true)
                .unwrap_err()
                .to_string(),
            format!(
                "{arg}: no .json, .yaml or .yml file in this directory or below it (hint: -f \
                 reads a directory's files with these extensions; name a file with another one \
                 itself)"
            )
        );
    }

    #[test]
    fn stdin_is_dash() {
        let objects = read(&[Source::parse("-")], &mut YAML.as_bytes()).unwrap();
        assert_eq!(objects.slices.len(), 2);
    }

    fn slice(name: &str, generation: i64) -> String {
        format!(
            r#"{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{{"name":"{name}"}},"spec":{{"driver":"media.liken.sh","nodeName":"n","pool":{{"name":"n","generation":{generation},"resourceSliceCount":1}},"devices":[{{"name":"d","attributes":{{"decodeVP9":{{"bool":true}}}}}}]}}}}"#
        )
    }

    fn files_with(texts: &[(&str, &str)]) -> (tempfile::TempDir, Vec<Source>) {
        let dir = tempfile::tempdir().unwrap();
        let sources = texts
            .iter()
            .map(|(name, text)| {
                let path = dir.path().join(name);
                std::fs::write(&path, text).unwrap();
                Source::File(path)
            })
            .collect();
        (dir, sources)
    }

    fn slice_names(objects: &Objects) -> Vec<&str> {
        objects
            .slices
            .iter()
            .map(|s| s.metadata.name.as_str())
            .collect()
    }

    #[test]
    fn the_same_object_given_twice_counts_once() {
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","items":[{},{}]}}"#,
            slice("a", 1),
            slice("b", 1)
        );
        let (_dir, files) = files_with(&[
            ("list.json", &list),
            ("a.yaml", YAML),
            ("one.json", &slice("a", 1)),
        ]);
        // Two -f of one file.
        let objects = read(&[files[0].clone(), files[0].clone()], &mut std::io::empty()).unwrap();
        assert_eq!(slice_names(&objects), ["a", "b"]);
        // Standard input and the file.
        let objects = read(&[Source::Stdin, files[0].clone()], &mut list.as_bytes()).unwrap();
        assert_eq!(slice_names(&objects), ["a", "b"]);
        // A List, and the same object in another file (JSON against JSON).
        let objects = read(&[files[0].clone(), files[2].clone()], &mut std::io::empty()).unwrap();
        assert_eq!(slice_names(&objects), ["a", "b"]);
        // The same object twice in one file.
        let twice = format!("{}\n{}", slice("a", 1), slice("a", 1));
        let objects = read(&[Source::Stdin], &mut twice.as_bytes()).unwrap();
        assert_eq!(slice_names(&objects), ["a"]);
    }

    #[test]
    fn a_different_object_under_the_same_identity_names_both_sources() {
        let (_dir, files) = files_with(&[
            ("monday.json", &slice("a", 1)),
            ("tuesday.json", &slice("a", 2)),
        ]);
        let err = read(&files, &mut std::io::empty()).unwrap_err();
        let (Source::File(monday), Source::File(tuesday)) = (&files[0], &files[1]) else {
            unreachable!()
        };
        assert_eq!(
            err.to_string(),
            format!(
                "ResourceSlice \"a\" is in {} and in {} with different content (hint: give one snapshot of the cluster, or several that do not overlap)",
                monday.display(),
                tuesday.display()
            )
        );
    }

    fn error_of(text: &[u8]) -> String {
        read(&[Source::Stdin], &mut &text[..])
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn input_without_kubernetes_objects_is_named_with_what_was_expected() {
        let expected = "not a Kubernetes object or List (an object has apiVersion and kind, a List has items) (hint: -f takes the output of `kubectl get ... -o yaml` or `-o json`)";
        assert_eq!(
            error_of(b"[1,2,3]"),
            format!("<stdin>:1:1: a JSON array, {expected}")
        );
        assert_eq!(
            error_of(b"\n  42\n"),
            format!("<stdin>:2:3: plain text, {expected}")
        );
        assert_eq!(
            error_of(b"plain words, no objects\n"),
            format!("<stdin>:1:1: plain text, {expected}")
        );
        assert_eq!(
            error_of(b"# a comment\n- a\n- b\n"),
            format!("<stdin>:2:1: a YAML sequence, {expected}")
        );
        // A probe record (`media-capabilities probe -o json` / `-o yaml`): data, but no object.
        assert_eq!(
            error_of(br#"{"node": "n1", "gpus": [{"address": "0000:00:02.0"}]}"#),
            format!("<stdin>:1:1: a JSON object without kind or items, {expected}")
        );
        assert_eq!(
            error_of(b"node: n1\ngpus:\n- address: 0000:00:02.0\n"),
            format!("<stdin>: YAML document 1 is a mapping without kind or items, {expected}")
        );
        // A second document that is not an object fails too, after good ones.
        let two = format!("{}\n[1]", slice("a", 1));
        assert_eq!(
            error_of(two.as_bytes()),
            format!("<stdin>:2:1: a JSON array, {expected}")
        );
        assert!(
            error_of(br#"{"apiVersion":"v1","kind":"List","items":[{"a":1}]}"#)
                .starts_with("<stdin>:1:43: an item of a List without a kind, not a Kubernetes")
        );
        // An apiVersion is no kind, in JSON and YAML alike; nor is a typo of `kind`.
        assert!(
            error_of(br#"{"apiVersion":"v1","metadata":{"name":"x"}}"#)
                .starts_with("<stdin>:1:1: a JSON object without kind or items, not a Kubernetes"),
        );
        assert!(
            error_of(b"apiVersion: resource.k8s.io/v1\nknd: ResourceSlice\nmetadata: {name: x}\n")
                .starts_with(
                    "<stdin>: YAML document 1 is a mapping without kind or items, not a Kubernetes"
                ),
        );
        assert!(
            error_of(
                b"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  metadata: {name: x}\n"
            )
            .starts_with(
                "<stdin>: YAML document 1 is a List with an item without a kind, not a Kubernetes"
            ),
        );
        // Items of a typed List have their kind from it.
        let typed = b"apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: x, namespace: n}\n";
        assert_eq!(
            read(&[Source::Stdin], &mut &typed[..]).unwrap().pods.len(),
            1
        );
        assert!(
            error_of(br#"{"items":[{"apiVersion":"v1","a":1}],"kind":"List"}"#)
                .starts_with("<stdin>:1:11: an item of a List without a kind, not a Kubernetes")
        );
        assert!(error_of(br#"{"kind":"List","items":[1,2]}"#).starts_with(
            "<stdin>:1:25: an item of a List that is not an object, not a Kubernetes"
        ));
        assert!(
            error_of(b" \n\t\n")
                .starts_with("<stdin>: holds no Kubernetes objects: it is empty (hint: -f takes")
        );
        assert!(
            error_of(b"---\n# nothing\n")
                .starts_with("<stdin>: holds no Kubernetes objects: it is empty")
        );
        assert!(
            error_of(b"\x7fELF\x02\x01\x01\x00\x00")
                .starts_with("<stdin>: not a text file (it holds a NUL byte) (hint:")
        );
        assert!(
            error_of(b"\xff\xd8\xff\xe0 jpeg")
                .starts_with("<stdin>: not a text file (it holds bytes that are not UTF-8)")
        );
    }

    #[test]
    fn pathological_input_fails_fast_with_bounded_memory() {
        // Deep nesting: stopped at serde_json's limit, whatever follows.
        let deep = format!("{{\"a\":{}", "[".repeat(100_000));
        assert_eq!(
            error_of(deep.as_bytes()),
            "<stdin>:1:133: nesting deeper than 128 levels, which no Kubernetes object is (hint: -f takes the output of `kubectl get ... -o yaml` or `-o json`)"
        );
        // In YAML too, before libyaml spends minutes on it.
        let deep_yaml = format!("apiVersion: {}", "[".repeat(100_000));
        assert_eq!(
            error_of(deep_yaml.as_bytes()),
            "<stdin>:1:141: nesting deeper than 128 levels, which no Kubernetes object is (hint: -f takes the output of `kubectl get ... -o yaml` or `-o json`)"
        );
        // YAML past 128 MiB is refused once that much is read, not held whole.
        let mut endless_yaml = std::io::Read::chain(
            &b"apiVersion: v1\nkind: List\nitems:\n"[..],
            std::io::repeat(b'\n'),
        );
        let err = read(&[Source::Stdin], &mut endless_yaml)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("<stdin>: over 128 MiB of YAML"), "{err}");
        // Endless junk: refused from the first block, or at 16 MiB for one object, never read
        // to its end (these readers never end).
        let mut zeros = std::io::repeat(0);
        assert!(
            read(&[Source::Stdin], &mut zeros)
                .unwrap_err()
                .to_string()
                .contains("NUL byte")
        );
        let mut words = std::io::repeat(b'a');
        assert!(
            read(&[Source::Stdin], &mut words)
                .unwrap_err()
                .to_string()
                .contains("plain text")
        );
        let mut endless = std::io::Read::chain(&b"{\"kind\":\"x"[..], std::io::repeat(b'x'));
        let err = read(&[Source::Stdin], &mut endless)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "an object over 16 MiB outside a List's items, which no Kubernetes object is"
            ),
            "{err}"
        );
        let mut endless_item =
            std::io::Read::chain(&b"{\"items\":[{\"kind\":\"x"[..], std::io::repeat(b'x'));
        let err = read(&[Source::Stdin], &mut endless_item)
            .unwrap_err()
            .to_string();
        assert!(err.contains("an item over 16 MiB"), "{err}");
    }

    #[test]
    fn errors_inside_items_are_placed_in_the_file() {
        let text = format!(
            "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n  {},\n  {{\"kind\": \"ResourceSlice\", \"spec\": }}\n]}}",
            slice("a", 1)
        );
        assert_eq!(
            error_of(text.as_bytes()),
            "<stdin>:3:37: expected value (hint: -f takes the output of `kubectl get ... -o yaml` or `-o json`)"
        );
        // Cut short inside an item.
        let short = format!("{{\"items\": [{}, {{\"kind\": \"Res", slice("a", 1));
        assert!(
            error_of(short.as_bytes()).contains("EOF while parsing"),
            "{}",
            error_of(short.as_bytes())
        );
    }

    #[test]
    fn kindless_items_before_the_lists_kind_are_read_once_it_is_known() {
        let text = r#"{"items":[{"metadata":{"name":"a"},"spec":{"driver":"d","pool":{"name":"p"}}}],"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","metadata":{}}"#;
        let objects = read(&[Source::Stdin], &mut text.as_bytes()).unwrap();
        assert_eq!(slice_names(&objects), ["a"]);
        assert!(objects.notes.is_empty(), "{:?}", objects.notes);
    }

    /// What the scanner hands over does not depend on where the blocks are cut.
    #[test]
    fn the_scanner_cuts_the_same_wherever_the_blocks_end() {
        let text = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[\n {},\n {{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"q\\\"}}]\"}}}}],\"metadata\":{{\"items\":[1]}}}}\n{}",
            slice("a", 1),
            slice("b", 2)
        );
        let cut = |at: usize| {
            let mut works = Vec::new();
            let mut emit = |w: Work| {
                works.push(match w {
                    Work::Items {
                        text,
                        starts,
                        kind,
                        api_version,
                    } => format!(
                        "items {:?} {starts:?} {kind:?} {api_version:?}",
                        String::from_utf8(text).unwrap()
                    ),
                    Work::Document { text, start, list } => format!(
                        "doc {:?} {start:?} {list}",
                        String::from_utf8(text).unwrap()
                    ),
                });
                true
            };
            let mut scanner = Scanner::new("t");
            scanner.feed(&text.as_bytes()[..at], &mut emit).unwrap();
            scanner.feed(&text.as_bytes()[at..], &mut emit).unwrap();
            scanner.finish(&mut emit).unwrap();
            works
        };
        let whole = cut(text.len());
        assert_eq!(whole.len(), 3, "{whole:#?}");
        assert!(whole[1].starts_with(r#"doc "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[],\"metadata\":{\"items\":[1]}}""#), "{}", whole[1]);
        for at in 0..text.len() {
            assert_eq!(cut(at), whole, "cut at {at}");
        }
        // And the whole text reads as it should.
        let objects = read(&[Source::Stdin], &mut text.as_bytes()).unwrap();
        assert_eq!(slice_names(&objects), ["a", "b"]);
        assert_eq!(objects.pods[0].metadata.name.as_deref(), Some("q\"}]"));
    }
}
