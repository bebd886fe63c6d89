//go:build oracle135

package main

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.35: AllocatorFeatures (dynamicresources.go, v1.35.4) with the default gates:
// DRAAdminAccess, DRAPrioritizedList beta (on); DRADeviceTaints, DRAPartitionableDevices,
// DRAConsumableCapacity, DRADeviceBindingConditions (so DeviceBindingAndStatus) alpha (off).
const release = "1.35"

// DRADeviceTaintRules is alpha (off).
const deviceTaintRules = false

func allocatorFeatures() structured.Features {
	return structured.Features{
		AdminAccess:     true,
		PrioritizedList: true,
	}
}

func consumableCapacity(f structured.Features) bool { return f.ConsumableCapacity }

func celFeatures() cel.Features { return cel.Features{EnableConsumableCapacity: false} }

// An error that rules out the node only (structured.ErrFailedAllocationOnNode): the scheduler
// marks the node unschedulable and goes on (dynamicresources.go Filter).
func failedOnNode(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) }

// 1.35's default features pick the incubating allocator, whose selectorsMatch
// (allocator_incubating.go v0.35.10) passes no allowMultipleAllocations: CEL sees false.
const celSeesMultipleAllocations = false
