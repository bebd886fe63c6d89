//! VA-API: libva loaded at run time (`ffi`, the only unsafe code), the probe of one GPU
//! (`probe`), what it learned as plain data (`report`), and the one function that turns a report
//! into capability values (`rules`).

// The crate denies unsafe code (lib.rs); libva's C interface is the one place that needs it.
#[allow(unsafe_code)]
pub mod ffi;
pub mod probe;
pub mod report;
pub mod rules;
