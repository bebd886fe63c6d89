//! Writing Kubernetes objects the way kubectl does: multi-document YAML, or a JSON `List`.
//!
//! Output is rendered completely before the first byte is written, so a command that fails
//! leaves nothing half-written on stdout.

use std::io::{self, Write};

use serde::Serialize;

/// `-o` for commands that print Kubernetes objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ObjectFormat {
    /// Multi-document YAML, for `kubectl apply -f -`.
    #[default]
    Yaml,
    /// One JSON `List` of the objects.
    Json,
}

/// Renders objects as multi-document YAML (`---` between documents) or as a JSON `List`.
pub(crate) fn render_objects<T: Serialize>(
    objects: &[T],
    format: ObjectFormat,
) -> Result<String, RenderError> {
    match format {
        ObjectFormat::Yaml => {
            // kubectl's quoting (cli::yaml), so that `kubectl apply -f -` reads back exactly
            // what was written.
            let documents = objects
                .iter()
                .map(|o| serde_json::to_value(o).map(|v| crate::cli::yaml::to_string(&v)))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(documents.join("---\n"))
        }
        ObjectFormat::Json => {
            let items = objects
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()?;
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": items,
                "metadata": { "resourceVersion": "" },
            });
            let mut text = serde_json::to_string_pretty(&list)?;
            text.push('\n');
            Ok(text)
        }
    }
}

/// Serialising an object failed; only possible with a bug in our types, but reported, not
/// panicked on.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("render YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("render JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes finished output. A reader that went away (`| head`) is not an error: the command
/// stops quietly, as command-line tools do.
pub(crate) fn write_all(out: &mut dyn Write, text: &str) -> io::Result<()> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_documents_are_separated() {
        let objects = [
            serde_json::json!({"a": 1}),
            serde_json::json!({"b": "x\ny\n"}),
        ];
        let text = render_objects(&objects, ObjectFormat::Yaml).unwrap();
        assert_eq!(text, "a: 1\n---\nb: |\n  x\n  y\n");
    }

    #[test]
    fn json_is_a_list() {
        let objects = [serde_json::json!({"a": 1})];
        let text = render_objects(&objects, ObjectFormat::Json).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["kind"], "List");
        assert_eq!(value["apiVersion"], "v1");
        assert_eq!(value["items"][0]["a"], 1);
    }

    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_not_an_error() {
        assert!(write_all(&mut Closed, "x").is_ok());
    }
}
