//! What one node states, as a pipeline: `sysfs` finds the render nodes and their PCI identity,
//! `va` asks each GPU's VA-API driver through libva and records the answer as a report,
//! `device` applies the catalogue's rules to a report (attributes of one device), and `slice`
//! turns a node's GPUs into the ResourceSlice the agent wants published, with `taint` on the
//! GPUs whose probe failed (`failure` says why). Only `sysfs` and `va` touch the machine; the
//! rest is pure.

pub mod device;
pub mod failure;
pub mod slice;
pub mod sysfs;
pub mod taint;
pub mod va;
