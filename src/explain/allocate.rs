//! The scheduler's allocation rules, pure.
