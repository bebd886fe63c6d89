package main

// A fleet case: the objects as `why -f` reads them, the pod whose claims to allocate, and the
// real allocator run on every node as the scheduler of this release runs it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// How long one node's search may take: the allocator backtracks, and a fleet that makes it
// search too long is reported as an error rather than hanging the test.
const nodeTimeout = 20 * time.Second

// The scheduler's CEL cache size (dynamicresources.go: `cel.NewCache(10, ...)`).
const celCacheSize = 10

type fleetAnswer struct {
	// Every candidate node: the Node objects, or without them the nodes the slices name.
	Nodes []nodeAnswer `json:"nodes"`
	// The scheduler's PreFilter rules the pod out on every node (a class that does not exist).
	Unschedulable string `json:"unschedulable,omitempty"`
}

type nodeAnswer struct {
	Node          string        `json:"node"`
	Allocated     []claimAnswer `json:"allocated,omitempty"`
	Unallocatable bool          `json:"unallocatable,omitempty"`
	// Why the node is ruled out, when the allocator says (1.35+: invalid pools).
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

type claimAnswer struct {
	Claim   string         `json:"claim"`
	Devices []deviceAnswer `json:"devices"`
}

type deviceAnswer struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

type fleet struct {
	nodes      []*v1.Node
	slices     []*resourceapi.ResourceSlice
	classes    map[string]*resourceapi.DeviceClass
	claims     map[string]*resourceapi.ResourceClaim
	claimOrder []string
	templates  map[string]*resourceapi.ResourceClaimTemplate
	pods       map[string]*v1.Pod
	taintRules []taintRule
}

// A DeviceTaintRule, read without its API version's type: v1alpha3 in 1.35, v1beta2 in 1.36,
// v1 in 1.37 all have this shape.
type taintRule struct {
	Spec struct {
		DeviceSelector *struct {
			Driver *string `json:"driver"`
			Pool   *string `json:"pool"`
			Device *string `json:"device"`
		} `json:"deviceSelector"`
		Taint resourceapi.DeviceTaint `json:"taint"`
	} `json:"spec"`
}

type meta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// readFleet types the objects the allocator needs and defaults them as the API server does;
// other kinds are left alone, as why leaves them.
func readFleet(objects []json.RawMessage) (*fleet, error) {
	f := &fleet{
		classes:   map[string]*resourceapi.DeviceClass{},
		claims:    map[string]*resourceapi.ResourceClaim{},
		templates: map[string]*resourceapi.ResourceClaimTemplate{},
		pods:      map[string]*v1.Pod{},
	}
	for i, raw := range objects {
		var m meta
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("object %d: %w", i+1, err)
		}
		// A namespaced object without a namespace lands in the context's namespace when
		// applied; the oracle takes kubectl's default one.
		namespaced := m.Kind == "Pod" || m.Kind == "ResourceClaim" || m.Kind == "ResourceClaimTemplate"
		if namespaced && m.Metadata.Namespace == "" {
			m.Metadata.Namespace = metav1.NamespaceDefault
		}
		key := m.Metadata.Namespace + "/" + m.Metadata.Name
		group, _, _ := strings.Cut(m.APIVersion, "/")
		resource := group == "resource.k8s.io"
		if resource && m.Kind != "DeviceTaintRule" && m.APIVersion != "resource.k8s.io/v1" {
			return nil, fmt.Errorf("%s %s: apiVersion %s is not read (hint: the oracle reads resource.k8s.io/v1 objects)", m.Kind, key, m.APIVersion)
		}
		var err error
		switch {
		case m.Kind == "Node" && m.APIVersion == "v1":
			var n v1.Node
			err = json.Unmarshal(raw, &n)
			f.nodes = append(f.nodes, &n)
		case m.Kind == "Pod" && m.APIVersion == "v1":
			var p v1.Pod
			err = json.Unmarshal(raw, &p)
			p.Namespace = m.Metadata.Namespace
			f.pods[key] = &p
		case resource && m.Kind == "ResourceSlice":
			var s resourceapi.ResourceSlice
			err = json.Unmarshal(raw, &s)
			defaultSlice(&s)
			f.slices = append(f.slices, &s)
		case resource && m.Kind == "DeviceClass":
			var c resourceapi.DeviceClass
			err = json.Unmarshal(raw, &c)
			f.classes[c.Name] = &c
		case resource && m.Kind == "ResourceClaim":
			var c resourceapi.ResourceClaim
			err = json.Unmarshal(raw, &c)
			c.Namespace = m.Metadata.Namespace
			defaultClaim(&c)
			if _, dup := f.claims[key]; !dup {
				f.claimOrder = append(f.claimOrder, key)
			}
			f.claims[key] = &c
		case resource && m.Kind == "ResourceClaimTemplate":
			var t resourceapi.ResourceClaimTemplate
			err = json.Unmarshal(raw, &t)
			t.Namespace = m.Metadata.Namespace
			defaultClaimSpec(&t.Spec.Spec)
			f.templates[key] = &t
		case resource && m.Kind == "DeviceTaintRule":
			var r taintRule
			err = json.Unmarshal(raw, &r)
			defaultTaint(&r.Spec.Taint)
			f.taintRules = append(f.taintRules, r)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", m.Kind, key, err)
		}
	}
	return f, nil
}

// podClaims finds the claims of the pod the scheduler would allocate: each entry of
// spec.resourceClaims names a claim, or a template whose claim status.resourceClaimStatuses
// names; a claim not created yet is made from its template as the claim controller would.
// Claims already allocated are returned apart: they pin the pod to their nodes.
func (f *fleet) podClaims(pod string) (pending, allocated []*resourceapi.ResourceClaim, err error) {
	p, ok := f.pods[pod]
	if !ok {
		return nil, nil, fmt.Errorf("pod %s not found in the objects (hint: name it NAMESPACE/NAME)", pod)
	}
	ns := p.Namespace
	for _, entry := range p.Spec.ResourceClaims {
		var claim *resourceapi.ResourceClaim
		switch {
		case entry.ResourceClaimName != nil:
			claim = f.claims[ns+"/"+*entry.ResourceClaimName]
			if claim == nil {
				return nil, nil, fmt.Errorf("pod %s: claim %s/%s not found", pod, ns, *entry.ResourceClaimName)
			}
		case entry.ResourceClaimTemplateName != nil:
			for _, s := range p.Status.ResourceClaimStatuses {
				if s.Name == entry.Name && s.ResourceClaimName != nil {
					claim = f.claims[ns+"/"+*s.ResourceClaimName]
				}
			}
			if claim == nil {
				t := f.templates[ns+"/"+*entry.ResourceClaimTemplateName]
				if t == nil {
					return nil, nil, fmt.Errorf("pod %s: template %s/%s not found", pod, ns, *entry.ResourceClaimTemplateName)
				}
				claim = &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name + "-" + entry.Name},
					Spec:       *t.Spec.Spec.DeepCopy(),
				}
			}
		default:
			return nil, nil, fmt.Errorf("pod %s: claim entry %s names neither a claim nor a template", pod, entry.Name)
		}
		if claim.UID == "" {
			claim = claim.DeepCopy()
			claim.UID = types.UID("uid-" + claim.Namespace + "-" + claim.Name)
		}
		if claim.Status.Allocation != nil {
			allocated = append(allocated, claim)
		} else {
			pending = append(pending, claim)
		}
	}
	return pending, allocated, nil
}

// allocatedState is what the scheduler's claim tracker holds (dynamicresources
// allocateddevices.go `foreachAllocatedDevice`): every allocated device but admin access
// ones; with DRAConsumableCapacity a result with a share ID is a shared allocation.
func (f *fleet) allocatedState(consumable bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, key := range f.claimOrder {
		claim := f.claims[key]
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if consumable && r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// taintedSlices applies DeviceTaintRules as the scheduler's slice tracker does
// (resourceslice/tracker tracker.go `applyPatches`, v0.37.2), where the release enables them.
func (f *fleet) taintedSlices() []*resourceapi.ResourceSlice {
	if !deviceTaintRules || len(f.taintRules) == 0 {
		return f.slices
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(f.slices))
	for _, slice := range f.slices {
		patched := slice
		for _, rule := range f.taintRules {
			sel := rule.Spec.DeviceSelector
			if sel == nil {
				continue // no selector matches no devices
			}
			if (sel.Driver != nil && *sel.Driver != slice.Spec.Driver) || (sel.Pool != nil && *sel.Pool != slice.Spec.Pool.Name) {
				continue
			}
			for i, device := range slice.Spec.Devices {
				if sel.Device != nil && *sel.Device != device.Name {
					continue
				}
				if patched == slice {
					patched = slice.DeepCopy()
				}
				patched.Spec.Devices[i].Taints = append(patched.Spec.Devices[i].Taints, rule.Spec.Taint)
			}
		}
		out = append(out, patched)
	}
	return out
}

// candidates are the Node objects by name, or, with none, a bare node per name the slices give.
func (f *fleet) candidates() []*v1.Node {
	nodes := append([]*v1.Node(nil), f.nodes...)
	if len(nodes) == 0 {
		names := sets.New[string]()
		for _, s := range f.slices {
			if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
				names.Insert(*s.Spec.NodeName)
			}
			for _, d := range s.Spec.Devices {
				if d.NodeName != nil && *d.NodeName != "" {
					names.Insert(*d.NodeName)
				}
			}
		}
		for _, name := range sets.List(names) {
			nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, name := range names {
		out = append(out, l[name])
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// missingClass is the scheduler's PreFilter check (dynamicresources.go `validateDeviceClass`):
// a request naming a class that does not exist makes the pod unschedulable everywhere.
func missingClass(classes classLister, claims []*resourceapi.ResourceClaim) string {
	for _, claim := range claims {
		for _, r := range claim.Spec.Devices.Requests {
			check := func(name, class string) string {
				if _, ok := classes[class]; !ok && class != "" {
					return fmt.Sprintf("request %s: device class %s does not exist", name, class)
				}
				return ""
			}
			if r.Exactly != nil {
				if msg := check(r.Name, r.Exactly.DeviceClassName); msg != "" {
					return msg
				}
			}
			for _, sub := range r.FirstAvailable {
				if msg := check(r.Name+"/"+sub.Name, sub.DeviceClassName); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

// allocateFleet runs the release's allocator on every candidate node for the pod's claims.
func allocateFleet(ctx context.Context, objects []json.RawMessage, pod string) (*fleetAnswer, error) {
	f, err := readFleet(objects)
	if err != nil {
		return nil, err
	}
	pending, allocated, err := f.podClaims(pod)
	if err != nil {
		return nil, err
	}
	features := allocatorFeatures()
	answer := &fleetAnswer{Nodes: []nodeAnswer{}}
	nodes := f.candidates()
	if msg := missingClass(classLister(f.classes), pending); msg != "" {
		answer.Unschedulable = msg
		for _, n := range nodes {
			answer.Nodes = append(answer.Nodes, nodeAnswer{Node: n.Name, Unallocatable: true})
		}
		return answer, nil
	}
	cache := cel.NewCache(celCacheSize, celFeatures())
	allocator, err := structured.NewAllocator(ctx, features, f.allocatedState(consumableCapacity(features)),
		classLister(f.classes), f.taintedSlices(), cache)
	if err != nil {
		return nil, fmt.Errorf("new allocator: %w", err)
	}
	for _, node := range nodes {
		answer.Nodes = append(answer.Nodes, allocateNode(ctx, allocator, node, pending, allocated))
	}
	return answer, nil
}

func allocateNode(ctx context.Context, allocator structured.Allocator, node *v1.Node,
	pending, allocated []*resourceapi.ResourceClaim) nodeAnswer {
	answer := nodeAnswer{Node: node.Name}
	// A claim of the pod already allocated pins it to the nodes of its allocation
	// (dynamicresources.go Filter: "resourceclaim not available on the node").
	for _, claim := range allocated {
		if sel := claim.Status.Allocation.NodeSelector; sel != nil {
			match, err := nodeaffinity.NewNodeSelector(sel)
			if err != nil {
				answer.Error = fmt.Sprintf("claim %s/%s: allocation node selector: %v", claim.Namespace, claim.Name, err)
				return answer
			}
			if !match.Match(node) {
				answer.Unallocatable = true
				return answer
			}
		}
	}
	if len(pending) == 0 {
		answer.Allocated = []claimAnswer{}
		return answer
	}
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	results, err := allocator.Allocate(ctx, node, pending)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		answer.Error = fmt.Sprintf("the allocator searched for more than %s", nodeTimeout)
	case err != nil && failedOnNode(err):
		answer.Unallocatable = true
		answer.Reason = err.Error()
	case err != nil:
		answer.Error = err.Error()
	case results == nil:
		answer.Unallocatable = true
	default:
		for i, result := range results {
			c := claimAnswer{Claim: pending[i].Namespace + "/" + pending[i].Name, Devices: []deviceAnswer{}}
			for _, d := range result.Devices.Results {
				c.Devices = append(c.Devices, deviceAnswer{Request: d.Request, Driver: d.Driver, Pool: d.Pool, Device: d.Device})
			}
			answer.Allocated = append(answer.Allocated, c)
		}
	}
	return answer
}
