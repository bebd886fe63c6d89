// The oracle: the scheduler's own DRA allocator and CEL (k8s.io/dynamic-resource-allocation
// `structured` and `cel`, one build per Kubernetes release) run on the objects `kubectl media why
// -f` reads, so that the tests can compare why's verdicts with the real thing.
//
//	oracle -f FILE [-f FILE...] [NAMESPACE/]POD   per node: allocated (devices), not allocatable, or the error
//	oracle -batch                                  JSON lines on stdin, one answer line per case on stdout
//
// A batch case is {"id", "objects": [...], "pod": "ns/name"} (a fleet) or {"id", "cel":
// {"expression", "device"}} (a selector on one device); see protocol.go.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// The longest input line (one case) and file the oracle reads: the tests' fleets are far
// smaller, and a bound keeps a runaway input from eating the machine.
const maxInput = 64 << 20

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var files fileList
	batch := flag.Bool("batch", false, "read cases as JSON lines on stdin, answer each with one JSON line")
	flag.Var(&files, "f", "a YAML or JSON file of objects (Lists and multi-document YAML), as kubectl media why -f reads")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: oracle -f FILE [-f FILE...] [NAMESPACE/]POD | oracle -batch\n"+
			"the Kubernetes %s scheduler's DRA allocator on every node, for the pod's claims\n", release)
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	switch {
	case *batch && (len(files) > 0 || flag.NArg() > 0):
		err = errors.New("-batch reads its cases from stdin and takes no files or pod (hint: drop -f and the pod, or drop -batch)")
	case *batch:
		err = runBatch(os.Stdin, os.Stdout)
	case flag.NArg() != 1 || len(files) == 0:
		err = errors.New("expected -f FILE... and one pod (hint: oracle -f fleet.yaml -f pod.yaml media/film-0)")
	default:
		err = runPlain(files, flag.Arg(0), os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

// runPlain reads the files like why -f and prints one line per node.
func runPlain(files []string, pod string, out io.Writer) error {
	var objects []json.RawMessage
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		docs, err := readObjects(io.LimitReader(f, maxInput+1), name)
		f.Close()
		if err != nil {
			return err
		}
		objects = append(objects, docs...)
	}
	if !strings.Contains(pod, "/") {
		pod = "default/" + pod
	}
	answer, err := allocateFleet(context.Background(), objects, pod)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Kubernetes %s allocator, pod %s\n", release, pod)
	for _, n := range answer.Nodes {
		switch {
		case n.Error != "":
			fmt.Fprintf(out, "%s: error: %s\n", n.Node, n.Error)
		case n.Unallocatable:
			fmt.Fprintf(out, "%s: not allocatable\n", n.Node)
		default:
			var parts []string
			for _, c := range n.Allocated {
				for _, d := range c.Devices {
					parts = append(parts, fmt.Sprintf("%s %s=%s/%s/%s", c.Claim, d.Request, d.Driver, d.Pool, d.Device))
				}
			}
			fmt.Fprintf(out, "%s: allocated %s\n", n.Node, strings.Join(parts, ", "))
		}
	}
	if answer.Unschedulable != "" {
		fmt.Fprintf(out, "unschedulable: %s\n", answer.Unschedulable)
	}
	return nil
}

// runBatch answers each line of `in` with one line on `out`. A case that cannot be read is
// answered with its error; only a broken stream stops the loop.
func runBatch(in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 1<<20), maxInput)
	w := bufio.NewWriter(out)
	for scanner.Scan() {
		line := scanner.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		answer := answerCase(line)
		b, err := json.Marshal(answer)
		if err != nil {
			return fmt.Errorf("encode answer: %w", err)
		}
		w.Write(b)
		w.WriteByte('\n')
		// Flushed per case: the tests read an answer before they send the next case.
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write answer: %w", err)
		}
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("read cases: %w (hint: one case per line, at most %d bytes)", err, maxInput)
	}
	return nil
}
