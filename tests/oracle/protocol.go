package main

// The batch protocol and the object reader shared with the plain mode.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/dynamic-resource-allocation/cel"
)

// How deep a List may nest Lists: kubectl never writes more than one level.
const maxListDepth = 4

type batchCase struct {
	ID      json.RawMessage   `json:"id"`
	Objects []json.RawMessage `json:"objects"`
	Pod     string            `json:"pod"`
	CEL     *celCase          `json:"cel"`
}

type celCase struct {
	Expression string `json:"expression"`
	Device     struct {
		Driver                   string                                                    `json:"driver"`
		AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations"`
		Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
		Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
	} `json:"device"`
}

type batchAnswer struct {
	ID      json.RawMessage `json:"id"`
	Release string          `json:"release"`
	// A fleet case's answer.
	*fleetAnswer
	// A CEL case's answer: "true", "false" or "error", with errorClass "compile" or "runtime".
	Result     string `json:"result,omitempty"`
	ErrorClass string `json:"errorClass,omitempty"`
	// The error of the case: the CEL error, or why the fleet could not be read.
	Error string `json:"error,omitempty"`
}

func answerCase(line []byte) batchAnswer {
	var c batchCase
	answer := batchAnswer{Release: release}
	if err := json.Unmarshal(line, &c); err != nil {
		answer.Error = fmt.Sprintf("read case: %v", err)
		return answer
	}
	answer.ID = c.ID
	switch {
	case c.CEL != nil:
		answer.Result, answer.ErrorClass, answer.Error = evalCEL(c.CEL)
	case c.Pod != "":
		fleet, err := allocateFleet(context.Background(), c.Objects, c.Pod)
		if err != nil {
			answer.Error = err.Error()
		}
		answer.fleetAnswer = fleet
	default:
		answer.Error = "a case has either cel or objects and pod"
	}
	return answer
}

// evalCEL compiles and runs a selector as the allocator does (cel.Cache `GetOrCompile`, then
// `DeviceMatches`, with the scheduler's features of this release).
func evalCEL(c *celCase) (result, class, message string) {
	cache := cel.NewCache(1, celFeatures())
	compiled := cache.GetOrCompile(c.Expression)
	if compiled.Error != nil {
		return "error", "compile", compiled.Error.Error()
	}
	matches, _, err := compiled.DeviceMatches(context.Background(), cel.Device{
		Driver:                   c.Device.Driver,
		AllowMultipleAllocations: c.Device.AllowMultipleAllocations,
		Attributes:               c.Device.Attributes,
		Capacity:                 c.Device.Capacity,
	})
	if err != nil {
		return "error", "runtime", err.Error()
	}
	return fmt.Sprint(matches), "", ""
}

// readObjects reads YAML or JSON documents, several per file, with Lists flattened, as why -f
// does; `name` is for the errors.
func readObjects(r io.Reader, name string) ([]json.RawMessage, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("read %s: larger than %d bytes (hint: split the file)", name, maxInput)
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []json.RawMessage
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := decoder.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: document %d: %w", name, doc, err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if out, err = flatten(out, raw, 0); err != nil {
			return nil, fmt.Errorf("read %s: document %d: %w", name, doc, err)
		}
	}
}

func flatten(out []json.RawMessage, raw json.RawMessage, depth int) ([]json.RawMessage, error) {
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	if list.Kind != "List" && (len(list.Kind) < 4 || list.Kind[len(list.Kind)-4:] != "List") {
		return append(out, raw), nil
	}
	if depth == maxListDepth {
		return nil, fmt.Errorf("Lists nested more than %d deep", maxListDepth)
	}
	var err error
	for _, item := range list.Items {
		if out, err = flatten(out, item, depth+1); err != nil {
			return nil, err
		}
	}
	return out, nil
}
