//! The diagnosis of one selector on one device: the first false clause of its top-level `&&`
//! chain, with the attribute values that clause read.
