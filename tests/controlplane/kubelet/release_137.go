//go:build k8s137

package main

// Kubernetes 1.37's kubelet API: dra.GetNodeFunc, the plugin manager's Run and the plugin
// handler's methods take a context (1.34's do not; see release_134.go).

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

func nodeGetter(_ context.Context, get func(context.Context) (*v1.Node, error)) dra.GetNodeFunc {
	return get
}

func runPlugins(ctx context.Context, plugins pluginmanager.PluginManager, ready config.SourcesReady, stop <-chan struct{}) {
	plugins.Run(ctx, ready, stop)
}

func (h *handler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	return h.verdict(name, h.inner.ValidatePlugin(ctx, name, endpoint, h.services(versions)))
}

func (h *handler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	return h.verdict(name, h.inner.RegisterPlugin(ctx, name, endpoint, h.services(versions), timeout))
}

func (h *handler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.inner.DeRegisterPlugin(ctx, name, endpoint)
}

// updateHealth: 1.37's UpdateAllocatedResourcesStatus takes the logger.
func updateHealth(ctx context.Context, manager *dra.Manager, pod *v1.Pod, status *v1.PodStatus) {
	manager.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), pod, status)
}

// healthMessage: the plugin's message, set with the gate ResourceHealthStatusMessage (beta, on).
func healthMessage(h v1.ResourceHealth) (string, bool) {
	if h.Message == nil {
		return "", false
	}
	return *h.Message, true
}
