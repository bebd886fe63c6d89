//! What `kubectl media` reads about the fleet: `objects` parses Kubernetes objects (one parser
//! for files and the cluster), `files` reads `-f` inputs, `cluster` lists them from the API
//! server, `inventory` (pure) turns slices into the fleet's GPUs that `caps` renders, and
//! `holders` (pure) joins ResourceClaims' allocations to those GPUs; `tls` words a refused
//! certificate.

pub mod allocated;
pub mod cluster;
pub mod files;
pub(crate) mod holders;
pub(crate) mod inventory;
pub mod objects;
pub(crate) mod protobuf;
pub(crate) mod tls;
