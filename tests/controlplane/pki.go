package main

// The cluster's keys, made fresh for each run: one CA that signs the API server's serving
// certificate and the admin's client certificate (as kubeadm's admin.conf), and the key that
// signs and verifies ServiceAccount tokens. ECDSA P-256: generating RSA keys costs seconds on a
// loaded machine.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// frontProxyClient is the name kube-apiserver accepts on request-header clients.
const frontProxyClient = "front-proxy-client"

// validity outlives any test run; the keys die with the state directory.
const validity = 24 * time.Hour

type pki struct {
	caCert *x509.Certificate
	caKey  crypto.Signer
}

func newPKI() (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "controlplane-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse the CA certificate: %w", err)
	}
	return &pki{caCert: cert, caKey: key}, nil
}

func (p *pki) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.caCert.Raw})
}

// issue signs a leaf: a serving certificate when hosts are given, a client certificate otherwise.
func (p *pki) issue(serial int64, subject pkix.Name, hosts []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the key of %s: %w", subject.CommonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      subject,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign the certificate of %s: %w", subject.CommonName, err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the key of %s: %w", subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// files are the paths kube-apiserver's flags name.
type files struct {
	caCert, servingCert, servingKey, saKey, adminKubeconfig string
	proxyCert, proxyKey                                     string
	auditPolicy, auditLog                                   string
}

// writePKI writes every key and certificate into dir, and the admin kubeconfig for serverURL.
func writePKI(dir, serverURL string) (files, error) {
	f := files{
		caCert:          filepath.Join(dir, "ca.crt"),
		servingCert:     filepath.Join(dir, "apiserver.crt"),
		servingKey:      filepath.Join(dir, "apiserver.key"),
		saKey:           filepath.Join(dir, "sa.key"),
		adminKubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		proxyCert:       filepath.Join(dir, "front-proxy-client.crt"),
		proxyKey:        filepath.Join(dir, "front-proxy-client.key"),
		auditPolicy:     filepath.Join(dir, "audit-policy.yaml"),
		auditLog:        filepath.Join(dir, "audit.log"),
	}
	p, err := newPKI()
	if err != nil {
		return f, err
	}
	// The names kube-apiserver's own certificate carries in a kubeadm cluster, for clients that
	// reach it by its in-cluster name.
	hosts := []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "10.0.0.1"}
	servingCert, servingKey, err := p.issue(2, pkix.Name{CommonName: "kube-apiserver"}, hosts)
	if err != nil {
		return f, err
	}
	// system:masters: the group RBAC lets do anything, as kubeadm's admin.conf had it.
	adminCert, adminKey, err := p.issue(3, pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}}, nil)
	if err != nil {
		return f, err
	}
	// The aggregation layer's client (kubeadm's front-proxy-client): the scheduler's delegated
	// authentication reads its CA from extension-apiserver-authentication and logs errors
	// without one. One CA serves for both here.
	proxyCert, proxyKey, err := p.issue(4, pkix.Name{CommonName: frontProxyClient}, nil)
	if err != nil {
		return f, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("generate the service account key: %w", err)
	}
	saKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		return f, fmt.Errorf("encode the service account key: %w", err)
	}
	for path, data := range map[string][]byte{
		f.caCert: p.caPEM(), f.servingCert: servingCert, f.servingKey: servingKey, f.saKey: saKeyPEM,
		f.proxyCert: proxyCert, f.proxyKey: proxyKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, fmt.Errorf("write %s: %w", path, err)
		}
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["controlplane"] = &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: p.caPEM()}
	config.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: adminCert, ClientKeyData: adminKey}
	config.Contexts["admin@controlplane"] = &clientcmdapi.Context{Cluster: "controlplane", AuthInfo: "admin", Namespace: "default"}
	config.CurrentContext = "admin@controlplane"
	if err := clientcmd.WriteToFile(*config, f.adminKubeconfig); err != nil {
		return f, fmt.Errorf("write %s: %w", f.adminKubeconfig, err)
	}
	return f, nil
}
