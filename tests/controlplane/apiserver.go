package main

// kube-apiserver in process, started as its command starts it (cmd/kube-apiserver/app:
// options, Complete, Validate, Run) with the flags kubeadm gives a real cluster: client
// certificates, ServiceAccount tokens with their own signing key, Node and RBAC authorization,
// the default admission plugins (ValidatingAdmissionPolicy among them) plus NodeRestriction.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/rest"
	apiapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiopts "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// serviceAccountIssuer is the issuer kubeadm sets (`--service-account-issuer`).
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// auditPolicy records who called what on DRA's objects and Nodes, at Metadata level (no
// bodies): the tests count an agent's requests there, by verb and answer, rather than trusting
// the agent's own counters. Other resources are left out to keep the log small.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources:
  - group: resource.k8s.io
  - group: ""
    resources: [nodes]
- level: None
`

func writeAuditPolicy(f files) error {
	if err := os.WriteFile(f.auditPolicy, []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", f.auditPolicy, err)
	}
	return nil
}

// startAPIServer runs kube-apiserver on listener until ctx ends; its result arrives on the
// returned channel (nil after a clean stop).
func startAPIServer(ctx context.Context, listener net.Listener, etcdURL string, f files, gates, runtimeConfig string) (<-chan error, error) {
	s := apiopts.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, set := range s.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	port := listener.Addr().(*net.TCPAddr).Port
	flags := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.servingCert,
		"--tls-private-key-file=" + f.servingKey,
		"--client-ca-file=" + f.caCert,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + f.saKey,
		"--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=10.0.0.0/16",
		"--allow-privileged=true",
		// The kubernetes Service's endpoints would be the loopback address, which validation
		// refuses (an error every 10 s); nothing in the tests runs in-cluster.
		"--endpoint-reconciler-type=none",
		"--requestheader-client-ca-file=" + f.caCert,
		"--requestheader-allowed-names=" + frontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.proxyCert,
		"--proxy-client-key-file=" + f.proxyKey,
		// A stop waits for in-flight requests, then gives the HTTP server 2 s (answering 429
		// meanwhile) instead of the request timeout, 60 s, that open watches would take.
		"--shutdown-send-retry-after=true",
		"--audit-policy-file=" + f.auditPolicy,
		"--audit-log-path=" + f.auditLog,
		// blocking: each event is written before the request's answer completes, so a test
		// that saw an answer finds its event (batch mode would hold it back up to a second).
		"--audit-log-mode=blocking",
		"--audit-log-format=json",
		"--audit-log-maxbackup=0",
	}
	if gates != "" {
		flags = append(flags, "--feature-gates="+gates)
	}
	if runtimeConfig != "" {
		flags = append(flags, "--runtime-config="+runtimeConfig)
	}
	if err := fs.Parse(flags); err != nil {
		return nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	// What the command's PersistentPreRunE does: settle feature gates and versions (one
	// registry for the process, shared with the scheduler and the controller manager).
	if err := compatibility.DefaultComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-apiserver feature gates: %w", err)
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	// The listener is bound before the options see it, so the port cannot be taken meanwhile.
	s.SecureServing.Listener = listener
	s.SecureServing.BindPort = port
	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("kube-apiserver options: %v", errs)
	}
	done := make(chan error, 1)
	go func() { done <- apiapp.Run(ctx, completed) }()
	return done, nil
}
