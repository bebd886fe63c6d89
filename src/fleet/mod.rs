//! What `kubectl media` reads about the fleet: `objects` parses Kubernetes objects (one parser
//! for files and the cluster), `files` reads `-f` inputs, `cluster` lists them from the API
//! server, and `inventory` (pure) turns slices into the fleet's GPUs that `caps` renders.

pub mod cluster;
pub mod files;
pub(crate) mod inventory;
pub mod objects;
