package main

// The API server's defaulting of the objects the allocator reads, ported from
// k8s.io/kubernetes pkg/apis/resource/v1 (defaults.go and zz_generated.defaults.go, identical in
// v1.34.4 and v1.37.2): importing that package drags in k8s.io/kubernetes and every staging
// module at v0.0.0. Objects read from files never went through an API server, so without this
// a request without allocationMode would have no mode and count 0.

import (
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func defaultExact(r *resourceapi.ExactDeviceRequest) {
	if r.AllocationMode == "" {
		r.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	}
	if r.AllocationMode == resourceapi.DeviceAllocationModeExactCount && r.Count == 0 {
		r.Count = 1
	}
	defaultTolerations(r.Tolerations)
}

func defaultSub(r *resourceapi.DeviceSubRequest) {
	if r.AllocationMode == "" {
		r.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	}
	if r.AllocationMode == resourceapi.DeviceAllocationModeExactCount && r.Count == 0 {
		r.Count = 1
	}
	defaultTolerations(r.Tolerations)
}

// The `+default="Equal"` of DeviceToleration.Operator.
func defaultTolerations(tolerations []resourceapi.DeviceToleration) {
	for i := range tolerations {
		if tolerations[i].Operator == "" {
			tolerations[i].Operator = resourceapi.DeviceTolerationOpEqual
		}
	}
}

func defaultClaimSpec(spec *resourceapi.ResourceClaimSpec) {
	for i := range spec.Devices.Requests {
		r := &spec.Devices.Requests[i]
		if r.Exactly != nil {
			defaultExact(r.Exactly)
		}
		for j := range r.FirstAvailable {
			defaultSub(&r.FirstAvailable[j])
		}
	}
}

func defaultClaim(c *resourceapi.ResourceClaim) {
	defaultClaimSpec(&c.Spec)
	if c.Status.Allocation != nil {
		for i := range c.Status.Allocation.Devices.Results {
			defaultTolerations(c.Status.Allocation.Devices.Results[i].Tolerations)
		}
	}
}

func defaultSlice(s *resourceapi.ResourceSlice) {
	for i := range s.Spec.Devices {
		for j := range s.Spec.Devices[i].Taints {
			defaultTaint(&s.Spec.Devices[i].Taints[j])
		}
	}
}

// SetDefaults_DeviceTaint stamps the time of creation; a taint's time changes no verdict.
func defaultTaint(t *resourceapi.DeviceTaint) {
	if t.TimeAdded == nil {
		t.TimeAdded = &metav1.Time{Time: time.Now().Truncate(time.Second)}
	}
}
