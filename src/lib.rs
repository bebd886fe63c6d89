//! media-operator: publishes what each GPU's VA-API driver states it can decode, encode and
//! scale as `media.liken.sh` DRA devices, and the `kubectl media` plugin that writes claims for
//! them, lists them and explains why a claim stays Pending.
//!
//! The two programs in `bin/` are thin entry points; everything they do lives here.

pub mod agent;
pub mod caps;
pub mod classes;
pub mod cli;
pub mod cluster;
pub mod device;
pub mod duration;
pub mod examples;
pub mod generated;
pub mod inventory;
pub mod names;
pub mod objects;
pub mod slice;
pub mod snapshot;
pub mod sysfs;
pub mod va;
