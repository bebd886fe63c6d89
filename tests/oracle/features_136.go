//go:build oracle136

package main

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.36: AllocatorFeatures (dynamicresources.go, v1.36.3) with the default gates:
// DRAAdminAccess, DRAPrioritizedList GA; DRADeviceTaints, DRAPartitionableDevices,
// DRAConsumableCapacity, DRADeviceBindingConditions beta (on), DRAResourceClaimDeviceStatus
// beta (on); DRAListTypeAttributes alpha (off).
const release = "1.36"

// DRADeviceTaintRules is beta but off by default in 1.36.
const deviceTaintRules = false

func allocatorFeatures() structured.Features {
	return structured.Features{
		AdminAccess:            true,
		ConsumableCapacity:     true,
		DeviceBindingAndStatus: true,
		DeviceTaints:           true,
		PartitionableDevices:   true,
		PrioritizedList:        true,
	}
}

func consumableCapacity(f structured.Features) bool { return f.ConsumableCapacity }

func celFeatures() cel.Features {
	return cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: false}
}

// An error that rules out the node only (structured.ErrFailedAllocationOnNode): the scheduler
// marks the node unschedulable and goes on (dynamicresources.go Filter).
func failedOnNode(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) }

// With ConsumableCapacity the incubating allocator (v0.36.6) passes allowMultipleAllocations.
const celSeesMultipleAllocations = true
