//go:build oracle134

package main

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.34: the scheduler's AllocatorFeatures (dynamicresources.go, v1.34.4) with the
// default gates of pkg/features/kube_features.go: DRAAdminAccess and DRAPrioritizedList beta
// (on), DRAResourceClaimDeviceStatus beta (on), DRADeviceTaints, DRAPartitionableDevices,
// DRAConsumableCapacity, DRADeviceBindingConditions alpha (off).
const release = "1.34"

// DRADeviceTaintRules does not exist before 1.35.
const deviceTaintRules = false

func allocatorFeatures() structured.Features {
	return structured.Features{
		AdminAccess:     true,
		PrioritizedList: true,
		DeviceStatus:    true,
	}
}

func consumableCapacity(f structured.Features) bool { return f.ConsumableCapacity }

func celFeatures() cel.Features { return cel.Features{EnableConsumableCapacity: false} }

// 1.34 has no ErrFailedAllocationOnNode: every error from Allocate fails the attempt.
func failedOnNode(error) bool { return false }

// 1.34's allocatorFeatures include DeviceStatus, which only the experimental allocator
// supports; allocator_experimental.go passes the device's allowMultipleAllocations to CEL.
const celSeesMultipleAllocations = true
