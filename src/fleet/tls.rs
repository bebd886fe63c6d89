//! A server certificate the client refused, in the words of kubectl users: what the certificate
//! is, and which kubeconfig field fixes it. rustls words its refusals by Rust names
//! (`Other(OtherError(CaUsedAsEndEntity))`); one of them, a self-signed CA certificate serving
//! as the server's own, is one kubectl (Go's crypto/x509) accepts when the kubeconfig trusts it.

use rustls::CertificateError;

/// What was wrong with the certificate, and the hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    /// Follows "sent a certificate that ...".
    pub problem: String,
    pub hint: &'static str,
}

const TRUST: &str = "set certificate-authority or certificate-authority-data in the kubeconfig's \
                     cluster to the CA that signed the server's certificate, or, for a test \
                     cluster only, insecure-skip-tls-verify: true";

/// The refusal in `error`'s chain, if the connection failed on the server's certificate.
pub(crate) fn certificate_problem(error: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(rustls::Error::InvalidCertificate(refused)) = e.downcast_ref::<rustls::Error>()
        {
            return Some(worded(refused));
        }
        // TLS errors reach us inside io::Errors (two deep, from hyper-rustls and tokio-rustls),
        // whose `source` skips the error they hold.
        current = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

fn worded(refused: &CertificateError) -> Refused {
    let (problem, hint): (String, &'static str) = match refused {
        CertificateError::UnknownIssuer => (
            "no certificate authority of the kubeconfig signed (kubectl says: x509: certificate \
             signed by unknown authority)"
                .into(),
            TRUST,
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => (
            context("is not for this server's name", refused),
            "set tls-server-name in the kubeconfig's cluster to a name the certificate holds, or \
             use that name in its server",
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
            context("has expired", refused),
            "renew the API server's certificate (kubeadm certs renew), or check this machine's \
             clock",
        ),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => (
            context("is not valid yet", refused),
            "check this machine's clock, and the API server's",
        ),
        CertificateError::BadSignature => ("has a signature that does not verify".into(), TRUST),
        CertificateError::BadEncoding => (
            "cannot be read (it is not a well-formed X.509 certificate)".into(),
            TRUST,
        ),
        CertificateError::Revoked => ("is revoked".into(), "give the API server a new certificate"),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => (
            "is not for serving TLS (its extended key usage)".into(),
            "give the API server a certificate for server authentication",
        ),
        CertificateError::Other(other) => match other.0.downcast_ref::<webpki::Error>() {
            Some(webpki::Error::CaUsedAsEndEntity) => (
                "is a CA certificate (CA:TRUE) serving as its own server certificate, which \
                 kubectl accepts when the kubeconfig trusts it and kubectl media's TLS (rustls) \
                 does not"
                    .into(),
                "give the API server a serving certificate signed by that CA (as kubeadm and \
                 kind do), or, for a test cluster only, set insecure-skip-tls-verify: true in \
                 the kubeconfig's cluster",
            ),
            _ => (format!("is refused by TLS: {}", other.0), TRUST),
        },
        other => (format!("is refused by TLS: {other}"), TRUST),
    };
    Refused { problem, hint }
}

/// `what`, with rustls's words when it has more than the variant's name to say.
fn context(what: &str, refused: &CertificateError) -> String {
    match refused {
        CertificateError::ExpiredContext { .. }
        | CertificateError::NotValidYetContext { .. }
        | CertificateError::NotValidForNameContext { .. } => format!("{what}: {refused}"),
        _ => what.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// As hyper-util hands it over: the rustls error inside two io::Errors inside another error.
    fn wrapped(error: rustls::Error) -> Box<dyn std::error::Error + Send + Sync> {
        #[derive(Debug)]
        struct Connect(std::io::Error);
        impl std::fmt::Display for Connect {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Connect {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let tls = std::io::Error::new(std::io::ErrorKind::InvalidData, error);
        Box::new(Connect(std::io::Error::other(tls)))
    }

    #[test]
    fn refused_certificates_are_worded_for_kubectl_users() {
        let ca_as_server = rustls::Error::InvalidCertificate(CertificateError::Other(
            rustls::OtherError(Arc::new(webpki::Error::CaUsedAsEndEntity)),
        ));
        let refused = certificate_problem(wrapped(ca_as_server).as_ref()).unwrap();
        assert!(
            refused.problem.starts_with("is a CA certificate (CA:TRUE)")
                && !refused.problem.contains("OtherError"),
            "{refused:?}"
        );
        assert!(refused.hint.contains("insecure-skip-tls-verify"));
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let refused = certificate_problem(wrapped(unknown).as_ref()).unwrap();
        assert!(refused.problem.contains("unknown authority"), "{refused:?}");
        assert!(refused.hint.starts_with("set certificate-authority"));
        // Every kind is said in words, never a Rust name alone.
        for kind in [
            CertificateError::Expired,
            CertificateError::NotValidYet,
            CertificateError::NotValidForName,
            CertificateError::BadSignature,
            CertificateError::BadEncoding,
            CertificateError::Revoked,
            CertificateError::InvalidPurpose,
        ] {
            let refused = worded(&kind);
            assert!(
                !refused.problem.contains(&format!("{kind:?}")),
                "{refused:?}"
            );
        }
        // Not a certificate: none.
        let other = std::io::Error::other("connection refused");
        assert_eq!(certificate_problem(&other), None);
    }
}
