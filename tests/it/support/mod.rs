//! Support code shared by the integration tests and the benchmarks (which include it with
//! `#[path = "../tests/it/support/mod.rs"] mod support;`), so nothing here depends on the test
//! harness.

// Each test binary uses a different part of the support code; the rest would warn as dead.
#![allow(dead_code)]

pub mod agent;
pub mod audit;
pub mod controlplane;
pub mod dockerfile;
pub mod examples;
pub mod fakeapi;
pub mod faultproxy;
pub mod generated;
pub mod grpc_raw;
pub mod helm;
pub mod image;
pub mod kube;
pub mod kubelet;
pub mod kubelet_real;
pub mod objects;
pub mod oracle;
pub mod render_fixtures;
pub mod timing;
pub mod vadriver;
pub mod vainfo;
