//! Reading API objects from files (`-f FILE`, `-f -` for stdin) instead of a cluster: the output
//! of `kubectl get ... -o yaml|json`, Lists, multi-document YAML, or several JSON documents in a
//! row. Objects go through the same parser as API responses ([`crate::fleet::objects`]), so a file
//! gives the same answer as the cluster it was taken from.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::fleet::objects::Objects;

/// A file that could not be read, or that is not YAML or JSON.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("read {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error(
        "{file}:{line}:{column}: {message} (hint: -f takes the output of `kubectl get ... -o yaml` \
         or `-o json`)"
    )]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
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

/// Reads every source in order into one set of objects of every kind.
pub(crate) fn read(sources: &[Source], stdin: &mut dyn Read) -> Result<Objects, SnapshotError> {
    let mut objects = Objects::default();
    read_into(&mut objects, sources, stdin)?;
    Ok(objects)
}

/// Reads every source in order into `objects`, keeping the kinds it wants.
pub(crate) fn read_into(
    objects: &mut Objects,
    sources: &[Source],
    stdin: &mut dyn Read,
) -> Result<(), SnapshotError> {
    for source in sources {
        let name = source.display();
        let text = match source {
            Source::Stdin => {
                let mut text = String::new();
                stdin
                    .read_to_string(&mut text)
                    .map_err(|source| SnapshotError::Read {
                        file: name.clone(),
                        source,
                    })?;
                text
            }
            Source::File(path) => read_file(path, &name)?,
        };
        add_text(objects, &text, &name)?;
    }
    Ok(())
}

fn read_file(path: &Path, name: &str) -> Result<String, SnapshotError> {
    std::fs::read_to_string(path).map_err(|source| SnapshotError::Read {
        file: name.to_string(),
        source,
    })
}

/// Adds the objects of one file's text: JSON when it starts with `{`, YAML otherwise.
pub fn add_text(objects: &mut Objects, text: &str, name: &str) -> Result<(), SnapshotError> {
    if text.trim_start().starts_with('{') {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
        for document in stream {
            let document = document.map_err(|e| json_error(name, &e))?;
            objects
                .add_json(document.get())
                .map_err(|e| json_error(name, &e))?;
        }
    } else {
        for document in serde_yaml::Deserializer::from_str(text) {
            let value = serde_json::Value::deserialize(document).map_err(|e| {
                let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
                SnapshotError::Syntax {
                    file: name.to_string(),
                    line,
                    column,
                    message: strip_location(&e.to_string()),
                }
            })?;
            if !value.is_null() {
                objects.add_value(&value);
            }
        }
    }
    Ok(())
}

fn json_error(name: &str, e: &serde_json::Error) -> SnapshotError {
    SnapshotError::Syntax {
        file: name.to_string(),
        line: e.line(),
        column: e.column(),
        message: strip_location(&e.to_string()),
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
    fn a_missing_file_is_named() {
        let err = read(
            &[Source::parse("/nonexistent/fleet.yaml")],
            &mut std::io::empty(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("read /nonexistent/fleet.yaml: "),
            "{err}"
        );
    }

    #[test]
    fn stdin_is_dash() {
        let objects = read(&[Source::parse("-")], &mut YAML.as_bytes()).unwrap();
        assert_eq!(objects.slices.len(), 2);
    }
}
