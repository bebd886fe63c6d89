//! The tree's shape, as docs/architecture.md draws it: no module imports one that imports it
//! back, directly or around a circle. A module's own children and its ancestors do not count
//! (a parent declares its children, a child may name its parent's items); every other path a
//! module's code names (`use crate::...`, `super::...`, a path in an expression) is an edge.
//! Test modules are left out: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// Every module of `src`, by its path (`agent::kubelet`), with its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            // The binaries (src/bin) are not modules of the library.
            if parts.first().is_some_and(|p| p == "bin") || parts.is_empty() {
                continue;
            }
            found.insert(parts.join("::"), path);
        }
    }
    found
}

/// A file's code without its tests and comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| match line.trim_start().starts_with("//") {
            true => "",
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn use_paths(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    let mut pending = vec![tree];
    while let Some(tree) = pending.pop() {
        let Some(open) = tree.find('{') else {
            out.push(tree);
            continue;
        };
        let prefix = &tree[..open];
        let Some(close) = tree.rfind('}').filter(|&c| c > open) else {
            panic!("a use tree whose braces do not close: {tree}");
        };
        let inner = &tree[open + 1..close];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    pending.push(format!("{prefix}{}", &inner[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        if start < inner.len() {
            pending.push(format!("{prefix}{}", &inner[start..]));
        }
    }
    out
}

/// The module a path names from `module`, if it is one of ours: the longest module prefix.
fn resolve(path: &str, module: &str, modules: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base: Vec<&str> = module.split("::").collect();
    match parts.first().copied() {
        Some("crate") => {
            parts.remove(0);
        }
        Some("super") => {
            while parts.first() == Some(&"super") {
                parts.remove(0);
                base.pop();
            }
            parts.splice(0..0, base);
        }
        Some("self") => {
            parts.remove(0);
            parts.splice(0..0, base);
        }
        _ => return None,
    }
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains_key(m))
}

/// Each module's edges to the others.
fn imports(modules: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let uses = Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([\w:{}\s,*]+);").unwrap();
    let paths = Regex::new(r"\b(?:crate|super|self)(?:::\w+)+").unwrap();
    let mut graph = BTreeMap::new();
    for (module, file) in modules {
        let code = code(&std::fs::read_to_string(file).expect("read a module"));
        let mut named: Vec<String> = uses
            .captures_iter(&code)
            .flat_map(|c| use_paths(&c[1]))
            .collect();
        named.extend(paths.find_iter(&code).map(|m| m.as_str().to_string()));
        let edges: BTreeSet<String> = named
            .iter()
            .filter_map(|p| resolve(p, module, modules))
            .filter(|m| m != module && !module.starts_with(&format!("{m}::")))
            .filter(|m| !m.starts_with(&format!("{module}::")))
            .collect();
        graph.insert(module.clone(), edges);
    }
    graph
}

/// A circle through `from`, if there is one: the modules in order, `from` first.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    // Breadth first from `from`, remembering each module's predecessor, until `from` is reached.
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        for next in graph.get(at).into_iter().flatten() {
            if next == from {
                let mut path = vec![at.to_string()];
                let mut step = at;
                while step != from {
                    step = previous[step];
                    path.push(step.to_string());
                }
                path.reverse();
                return Some(path);
            }
            if !previous.contains_key(next.as_str()) {
                previous.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    assert!(
        modules.len() > 50 && modules.contains_key("explain::cel::env"),
        "the tree was not read: {:?}",
        modules.keys().collect::<Vec<_>>()
    );
    let graph = imports(&modules);
    assert!(
        graph["agent::run"].contains("agent::publisher"),
        "the edges were not read: {:?}",
        graph["agent::run"]
    );
    let mut circles: BTreeSet<Vec<String>> = BTreeSet::new();
    for module in graph.keys() {
        if let Some(mut found) = circle(&graph, module) {
            // One entry per circle, whichever module it was found from.
            let first = found.iter().enumerate().min_by_key(|(_, m)| *m).unwrap().0;
            found.rotate_left(first);
            circles.insert(found);
        }
    }
    let lines: Vec<String> = circles
        .iter()
        .map(|c| format!("{} -> {}", c.join(" -> "), c[0]))
        .collect();
    assert!(
        lines.is_empty(),
        "modules that import each other (move what both need to a leaf):\n{}",
        lines.join("\n")
    );
}

#[test]
fn the_check_finds_a_circle_and_reads_use_trees() {
    assert_eq!(
        use_paths("super::{bounds, calls::{HASHED, owned}}"),
        [
            "super::calls::owned",
            "super::calls::HASHED",
            "super::bounds"
        ]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, e)| (m.to_string(), e.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(
        circle(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
    assert_eq!(circle(&graph, "d"), None);
}
