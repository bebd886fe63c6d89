//! The capabilities agent (`media-capabilities`): finds the node's GPUs, asks each one's VA-API
//! driver what it can do, and publishes the answers as a `media.liken.sh` ResourceSlice.

pub(crate) mod answers;
pub(crate) mod api;
pub mod cli;
pub mod config;
pub(crate) mod dropped_reads;
pub mod health;
pub mod kubelet;
pub mod liveness;
pub mod probe_cmd;
pub mod probing;
pub(crate) mod publisher;
pub(crate) mod render_nodes;
pub(crate) mod reprobe;
pub mod run;
