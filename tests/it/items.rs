//! Empty and repeated items cost no memory beyond a bound: a file of millions of `{}` (before
//! or after its List's kind), or of one object repeated, is read in a bounded peak, the empty
//! ones passed over with one warning. The peak is the kernel's count (`/usr/bin/time -f %M`).

use std::path::Path;
use std::process::{Command, Stdio};

/// The most a `caps -f` of these files may take at its peak. Measured with the debug build (the
/// tests'), for a List of N empty items whose kind comes last: 66 MiB for 1 million, 123 MiB for
/// 3 million, 126 MiB for 6 million: it levels off (the items are counted, not kept, and the
/// batches in flight are bounded), where holding them grew to 1.3 GiB before round 2. The
/// release build peaks about 10% lower.
const MAX_PEAK_MIB: f64 = 160.0;

/// `caps -f FILE`'s exit code, standard error and peak memory in MiB.
fn caps_file(file: &Path) -> (i32, String, f64) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("/usr/bin/time")
        .args([
            "-f",
            "peak %M",
            "--",
            env!("CARGO_BIN_EXE_kubectl-media"),
            "caps",
            "-f",
        ])
        .arg(file)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("HOME", home.path())
        .stdout(Stdio::null())
        .output()
        .expect("/usr/bin/time runs (apt-get install time)");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let (said, peak) = stderr.rsplit_once("peak ").expect("time's line");
    let said: String = said
        .lines()
        .filter(|l| !l.starts_with("Command exited with non-zero status"))
        .map(|l| format!("{l}\n"))
        .collect();
    let kib: f64 = peak.trim().parse().unwrap();
    (
        out.status.code().unwrap_or(-1),
        said.to_string(),
        kib / 1024.0,
    )
}

/// `head`, `n` copies of `item` joined by commas, then `tail`.
fn write_list(path: &Path, head: &str, item: &str, n: usize, tail: &str) {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    file.write_all(head.as_bytes()).unwrap();
    for i in 0..n {
        if i > 0 {
            file.write_all(b",").unwrap();
        }
        file.write_all(item.as_bytes()).unwrap();
    }
    file.write_all(tail.as_bytes()).unwrap();
}

const ITEMS: usize = 3_000_000;

#[test]
fn millions_of_empty_items_are_one_warning_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("empty.json");
    let kind = r#""kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1""#;
    for (head, tail) in [
        (format!("{{{kind},\"items\":["), "]}".to_string()),
        // The kind after the items, as kubectl writes a List: each waits for it.
        ("{\"items\":[".to_string(), format!("],{kind}}}")),
    ] {
        write_list(&file, &head, "{}", ITEMS, &tail);
        let (code, said, peak) = caps_file(&file);
        assert_eq!(code, 0, "{said}");
        assert_eq!(
            said.trim_end(),
            format!(
                "warning: {}: skipped {ITEMS} objects without metadata.name, which no API \
                 server stores\nNo media.liken.sh devices or render nodes found (the files hold no \
                 ResourceSlices).",
                file.display()
            )
        );
        assert!(peak < MAX_PEAK_MIB, "{peak:.0} MiB for {ITEMS} empty items");
        eprintln!("{ITEMS} empty items ({head}...): peak {peak:.0} MiB");
    }
    // Under a List whose kind gives them none, they are no objects: the first is refused.
    write_list(&file, "{\"items\":[", "{}", ITEMS, "],\"kind\":\"List\"}");
    let (code, said, peak) = caps_file(&file);
    assert_eq!(code, 1);
    assert_eq!(
        said.trim_end(),
        format!(
            "error: {}:1:11: an item of a List without a kind, not a Kubernetes object or List \
             (an object has apiVersion and kind, a List has items) (hint: -f takes the output of \
             `kubectl get ... -o yaml` or `-o json`)",
            file.display()
        )
    );
    assert!(peak < MAX_PEAK_MIB, "{peak:.0} MiB");
}

#[test]
fn one_object_repeated_a_million_times_is_kept_once_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("repeated.json");
    let slice = r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"n1-media.liken.sh"},"spec":{"driver":"media.liken.sh","nodeName":"n1","pool":{"name":"n1","generation":1,"resourceSliceCount":1},"devices":[{"name":"gpu-0","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:03:00.0"}}}]}}"#;
    write_list(
        &file,
        r#"{"kind":"List","apiVersion":"v1","items":["#,
        slice,
        1_000_000,
        "]}",
    );
    let (code, said, peak) = caps_file(&file);
    assert_eq!((code, said.as_str()), (0, ""));
    assert!(
        peak < MAX_PEAK_MIB,
        "{peak:.0} MiB for one slice a million times"
    );
    eprintln!("one slice 1,000,000 times: peak {peak:.0} MiB");
}
