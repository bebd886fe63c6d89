//! The protobuf messages and gRPC services of the kubelet APIs we serve, generated from the
//! `.proto` files in `proto/`. The code is committed under `generated/` so that building needs
//! no protoc; `tests/it/generated.rs` fails when it drifts from `proto/` (checked by the SHA-256
//! sums in `generated/SHA256SUMS`), and
//! `UPDATE_GENERATED=1 cargo test --features regenerate-protos --test it generated` rewrites it
//! with a protobuf compiler in Rust. The modules are pulled in with
//! `include!` so that `cargo fmt` leaves the generated text exactly as the generator wrote it.

/// Plugin registration (`pluginregistration.Registration`), served on the registration socket.
pub mod pluginregistration {
    include!("generated/pluginregistration.rs");
}

/// The kubelet's DRA plugin API (`k8s.io.kubelet.pkg.apis.dra.*.DRAPlugin`), served on the DRA
/// socket in both versions the kubelet may pick.
pub mod dra {
    /// Version `v1`, used by kubelets from Kubernetes 1.34 on.
    pub mod v1 {
        include!("generated/k8s.io.kubelet.pkg.apis.dra.v1.rs");
    }

    /// Version `v1beta1`, used by older kubelets; the messages are the same as in `v1`.
    pub mod v1beta1 {
        include!("generated/k8s.io.kubelet.pkg.apis.dra.v1beta1.rs");
    }
}
