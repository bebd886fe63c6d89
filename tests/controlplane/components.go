package main

// kube-scheduler and kube-controller-manager in process, each started as its command starts it
// (cmd/kube-scheduler/app.Setup and Run, cmd/kube-controller-manager/app options Config and Run),
// talking to the API server through the admin kubeconfig. No leader election: one of each.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmopts "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedopts "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// controllers are those the flows need: claims from templates (resourceclaim), cleanup by
// ownerReferences (garbage collector), each namespace's default ServiceAccount (whose
// appearance tells that the controllers run), namespace deletion, and the type-checking of
// ValidatingAdmissionPolicies into their status. Node lifecycle is left out on purpose: without
// kubelets it would mark every node NotReady.
var controllers = []string{
	names.ResourceClaimController,
	names.GarbageCollectorController,
	names.ServiceAccountController,
	names.NamespaceController,
	names.ValidatingAdmissionPolicyStatusController,
}

// startScheduler runs kube-scheduler until ctx ends and returns the URL of its /readyz, which
// turns ok once its informers have synced (the sched-handler-sync check).
func startScheduler(ctx context.Context, dir, kubeconfig string, done chan<- error) (string, error) {
	opts := schedopts.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, set := range opts.Flags.FlagSets {
		fs.AddFlagSet(set)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("kube-scheduler: listen: %w", err)
	}
	port := listener.Addr().(*net.TCPAddr).Port
	flags := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "scheduler"),
	}
	if err := fs.Parse(flags); err != nil {
		listener.Close()
		return "", fmt.Errorf("kube-scheduler flags: %w", err)
	}
	opts.SecureServing.Listener = listener
	cc, sched, err := schedapp.Setup(ctx, opts)
	if err != nil {
		listener.Close()
		return "", fmt.Errorf("kube-scheduler: %w", err)
	}
	go func() { done <- schedapp.Run(ctx, cc, sched) }()
	return fmt.Sprintf("https://127.0.0.1:%d/readyz", port), nil
}

// controllerManager is kube-controller-manager's options, made before any other component's
// flags: its Flags turns the WatchListClient gate on by default (as the real binary runs it),
// which the process-global gates refuse once another component's flags hold them. The other
// components' clients then list by watch too; their API behaviour does not change.
type controllerManager struct {
	options *kcmopts.KubeControllerManagerOptions
	all     []string
	off     []string
	aliases map[string]string
}

func newControllerManager(kubeconfig string) (*controllerManager, error) {
	s, err := kcmopts.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	m := &controllerManager{s, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()}
	named := s.Flags(m.all, m.off, m.aliases)
	s.ParsedFlags = &named
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, set := range named.FlagSets {
		fs.AddFlagSet(set)
	}
	flags := []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + strings.Join(controllers, ","),
	}
	if err := fs.Parse(flags); err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	return m, nil
}

// start runs kube-controller-manager with the controllers above until ctx ends.
func (m *controllerManager) start(ctx context.Context, done chan<- error) error {
	c, err := m.options.Config(ctx, m.all, m.off, m.aliases)
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	go func() { done <- kcmapp.Run(ctx, c.Complete()) }()
	return nil
}

// insecureLoopback is for the scheduler's /readyz only: its serving certificate is
// self-signed in memory by the scheduler, and it is our own child on loopback.
func insecureLoopback() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

// schedulerReady asks the scheduler's /readyz.
func schedulerReady(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
