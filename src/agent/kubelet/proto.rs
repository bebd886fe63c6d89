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

/// The kubelet's device health API (`DRAResourceHealth`, packages `v1` and `v1alpha1`, whose
/// gRPC names are just the version), served on the DRA socket beside `DRAPlugin`.
pub mod health {
    /// Version `v1` (k8s.io/kubelet v0.37): with `health_check_timeout_seconds` and `message`.
    pub mod v1 {
        include!("generated/v1.rs");
    }

    /// Version `v1alpha1` (Kubernetes 1.34).
    pub mod v1alpha1 {
        include!("generated/v1alpha1.rs");
    }
}
