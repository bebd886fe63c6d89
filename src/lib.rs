//! media-operator: publishes what each GPU's VA-API driver states it can decode, encode and
//! scale as `media.liken.sh` DRA devices, and the `kubectl media` plugin that writes claims for
//! them, lists them and explains why a claim stays Pending.
//!
//! The two programs in `bin/` are thin entry points; everything they do lives here.

// Unsafe code lives only in `node::va::ffi`, the one module allowed it.
#![deny(unsafe_code)]
// Items are `pub` only where another crate (the two programs, the tests, the benchmarks) uses
// them; the lint keeps `pub` off everything else.
#![warn(unreachable_pub)]

pub mod agent;
pub(crate) mod api_errors;
pub mod catalogue;
pub mod classes;
pub mod cli;
pub(crate) mod duration;
pub mod explain;
pub mod ffprobe;
pub mod fleet;
pub mod kubeconfig;
pub(crate) mod names;
pub mod node;
pub mod paging;
pub mod render_drivers;
pub mod stdio;
pub mod text;
pub mod tolerations;
pub mod usage;
