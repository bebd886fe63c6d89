//! Generated files are committed (completions, the capability reference) and must match what the
//! code generates now. To rewrite them after a change: `UPDATE_GENERATED=1 cargo test --test generated`.

use std::path::Path;

#[test]
fn generated_files_are_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for (path, contents) in media_operator::generated::files() {
        let file = root.join(&path);
        if update {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &contents).unwrap();
        } else if std::fs::read_to_string(&file).ok().as_deref() != Some(contents.as_str()) {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "generated files are stale: {stale:?}; rewrite them with `UPDATE_GENERATED=1 cargo test --test generated`"
    );
}
