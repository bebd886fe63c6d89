//! media-operator: publishes what each GPU's VA-API driver states it can decode, encode and
//! scale as `media.liken.sh` DRA devices, and the `kubectl media` plugin that writes claims for
//! them, lists them and explains why a claim stays Pending.
//!
//! The two programs in `bin/` are thin entry points; everything they do lives here.

pub mod agent;
pub mod catalogue;
pub mod classes;
pub mod cli;
pub mod duration;
pub mod fleet;
pub mod kubeconfig;
pub mod names;
pub mod node;
