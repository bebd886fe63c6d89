//go:build oracle137

package main

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.37: AllocatorFeatures (dynamicresources.go, v1.37.2) with the default gates:
// DRAAdminAccess, DRAPrioritizedList, DRADeviceTaints GA; DRAPartitionableDevices,
// DRAConsumableCapacity, DRADeviceBindingConditions, DRAFractionalCapacityRange beta (on);
// DRAListTypeAttributes, DRADerivedAttributes, DRADeviceCompatibilityGroups,
// DRAOptionalNodeOperations alpha (off).
const release = "1.37"

// DRADeviceTaintRules is GA: the scheduler's slice tracker applies the rules.
const deviceTaintRules = true

func allocatorFeatures() structured.Features {
	return structured.Features{
		AdminAccess:             true,
		ConsumableCapacity:      true,
		DeviceBindingAndStatus:  true,
		DeviceTaints:            true,
		FractionalCapacityRange: true,
		PartitionableDevices:    true,
		PrioritizedList:         true,
	}
}

func consumableCapacity(f structured.Features) bool { return f.ConsumableCapacity }

func celFeatures() cel.Features {
	return cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: false}
}

// An error that rules out the node only (structured.ErrFailedAllocationOnNode): the scheduler
// marks the node unschedulable and goes on (dynamicresources.go Filter).
func failedOnNode(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) }

// With ConsumableCapacity the incubating allocator (v0.37.2) passes allowMultipleAllocations.
const celSeesMultipleAllocations = true
