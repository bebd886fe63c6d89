//! The integration tests, as one test binary: the test API server, the kubelet stand-in and the
//! other support code compile once instead of once per test file. Each module is the test file
//! of one part of the product; `cargo test --test it caps` runs one of them.

mod support;

mod agent;
mod apiserver;
mod caps;
mod class;
mod cluster;
mod completion;
mod deploy;
mod docs;
mod explain;
mod files;
mod generated;
mod isolation;
mod kubelet;
mod libva;
mod probe_cli;
mod release;
mod rules_captures;
mod why;
