//go:build !k8s137

package main

// Kubernetes 1.34's kubelet API: no context in dra.GetNodeFunc, in the plugin manager's Run or
// in the plugin handler's methods (1.37 passes one to each; see release_137.go).

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

func nodeGetter(ctx context.Context, get func(context.Context) (*v1.Node, error)) dra.GetNodeFunc {
	return func() (*v1.Node, error) { return get(ctx) }
}

func runPlugins(_ context.Context, plugins pluginmanager.PluginManager, ready config.SourcesReady, stop <-chan struct{}) {
	plugins.Run(ready, stop)
}

func (h *handler) ValidatePlugin(name, endpoint string, versions []string) error {
	return h.verdict(name, h.inner.ValidatePlugin(name, endpoint, h.services(versions)))
}

func (h *handler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	return h.verdict(name, h.inner.RegisterPlugin(name, endpoint, h.services(versions), timeout))
}

func (h *handler) DeRegisterPlugin(name, endpoint string) {
	h.inner.DeRegisterPlugin(name, endpoint)
}

// updateHealth: 1.34's UpdateAllocatedResourcesStatus takes no logger.
func updateHealth(_ context.Context, manager *dra.Manager, pod *v1.Pod, status *v1.PodStatus) {
	manager.UpdateAllocatedResourcesStatus(pod, status)
}

// healthMessage: 1.34's ResourceHealth has no message.
func healthMessage(v1.ResourceHealth) (string, bool) { return "", false }
