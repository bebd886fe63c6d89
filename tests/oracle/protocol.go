package main

// The batch protocol and the object reader shared with the plain mode.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/google/cel-go/interpreter"
	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
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
	// A CEL case's answer as the scheduler sees a stored selector: "true", "false" or
	// "error", with errorClass "compile", "cost" (the runtime cost limit) or "runtime".
	Result     string `json:"result,omitempty"`
	ErrorClass string `json:"errorClass,omitempty"`
	// How the API server's validation takes the selector as a new one: "accepted", or the
	// refusal: "length", "compile", "cost" (the static estimate) or "internal"; NewError
	// is its message.
	New      string `json:"new,omitempty"`
	NewError string `json:"newError,omitempty"`
	// The API server's static estimate (`result.MaxCost`) when the selector compiles as new.
	Estimate *uint64 `json:"estimate,omitempty"`
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
		cel := evalCEL(c.CEL)
		answer.Result, answer.ErrorClass, answer.Error = cel.Result, cel.ErrorClass, cel.Error
		answer.New, answer.NewError, answer.Estimate = cel.New, cel.NewError, cel.Estimate
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

// evalCEL compiles and runs a selector as the allocator does (cel.Cache `GetOrCompile`: the
// StoredExpressions environment, no cost estimate; then `DeviceMatches` with what this
// release's allocator passes), and validates it as the API server validates a new selector.
func evalCEL(c *celCase) (answer batchAnswer) {
	answer.New, answer.NewError, answer.Estimate = validateNew(c.Expression)
	cache := cel.NewCache(1, celFeatures())
	compiled := cache.GetOrCompile(c.Expression)
	if compiled.Error != nil {
		answer.Result, answer.ErrorClass, answer.Error = "error", "compile", compiled.Error.Error()
		return answer
	}
	device := cel.Device{
		Driver:     c.Device.Driver,
		Attributes: c.Device.Attributes,
		Capacity:   c.Device.Capacity,
	}
	if celSeesMultipleAllocations {
		device.AllowMultipleAllocations = c.Device.AllowMultipleAllocations
	}
	matches, _, err := compiled.DeviceMatches(context.Background(), device)
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		answer.Result, answer.ErrorClass, answer.Error = "error", "cost", err.Error()
	case err != nil:
		answer.Result, answer.ErrorClass, answer.Error = "error", "runtime", err.Error()
	default:
		answer.Result = fmt.Sprint(matches)
	}
	return answer
}

// validateNew is k8s pkg/apis/resource/validation `validateCELExpression` (v1.37.2; the same
// checks as 1.34-1.36's `validateCELSelector`) for a new selector: the length limit, then
// compilation in the NewExpressions environment with the cost estimate, against the limit.
func validateNew(expression string) (class, message string, estimate *uint64) {
	if len(expression) > resourceapi.CELSelectorExpressionMaxLength {
		return "length", fmt.Sprintf("Too long: may not be more than %d bytes", resourceapi.CELSelectorExpressionMaxLength), nil
	}
	envType := environment.NewExpressions
	result := cel.GetCompiler(celFeatures()).CompileCELExpression(expression, cel.Options{EnvType: &envType})
	switch {
	case result.Error != nil && result.Error.Type == apiservercel.ErrorTypeInvalid:
		return "compile", result.Error.Error(), nil
	case result.Error != nil:
		return "internal", result.Error.Error(), nil
	case result.MaxCost > resourceapi.CELSelectorExpressionMaxCost:
		return "cost", fmt.Sprintf("too complex, exceeds cost limit (estimated %d)", result.MaxCost), &result.MaxCost
	}
	return "accepted", "", &result.MaxCost
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
