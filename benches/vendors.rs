//! The fleet with its render devices from the vendors' drivers against the same fleet with
//! liken's (issue 32), as `caps` and `why` print it. Included by the benchmarks with `#[path]`,
//! after `support`.

use crate::support::timing::Timing;

/// The vendors' fleet against liken's: the medians, the files' sizes, and the ratio of the
/// times and of the times per byte read (the vendors' devices state more than liken's).
pub fn line(what: &str, vendors: Timing, liken: Timing, vendors_file: &str, liken_file: &str) {
    let size = |path: &str| std::fs::metadata(path).expect("the fleet file").len() as f64;
    let (vendors_bytes, liken_bytes) = (size(vendors_file), size(liken_file));
    let ratio = vendors.median.as_secs_f64() / liken.median.as_secs_f64();
    let bytes = vendors_bytes / liken_bytes;
    println!(
        "{what} with the vendors' render devices {:.0} ms, with liken's {:.0} ms (medians, by turns): {ratio:.3}x, goal <= 1.05x {}",
        vendors.median.as_secs_f64() * 1e3,
        liken.median.as_secs_f64() * 1e3,
        if ratio <= 1.05 { "met" } else { "NOT met" }
    );
    println!(
        "  the files: vendors' {:.1} MiB, liken's {:.1} MiB ({bytes:.3}x the bytes); per byte read the vendors' fleet takes {:.3}x",
        vendors_bytes / f64::from(1 << 20),
        liken_bytes / f64::from(1 << 20),
        ratio / bytes
    );
}
