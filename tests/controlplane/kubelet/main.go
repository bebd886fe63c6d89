// Command kubelet runs the kubelet's own DRA code for the integration tests, without a container
// runtime: the plugin manager (pluginmanager.NewPluginManager) watching a plugins_registry
// directory, and the DRA manager (cm/dra.NewManager) with its plugin handler, ResourceSlice
// wiping and claim checkpoint, talking to a real API server, all of the release go.mod pins.
//
//	kubelet --kubeconfig FILE --node NAME --registry-dir DIR --state-dir DIR [--services LIST]
//	        [--feature-gates GATES]
//
// --services plays a kubelet that knows only these DRA services (e.g. v1beta1.DRAPlugin, as
// 1.32-1.33 did): the plugin's advertised list is cut to them before the kubelet's handler sees
// it, so the pinned release's own client speaks the older API. Empty: the release's own choice.
// --feature-gates sets the kubelet's gates as its flag of that name does
// (ResourceHealthStatus=true: the DRA manager watches the plugin's device health).
//
// stdout carries one line per event or answer:
//
//	ready                                  the plugin manager watches and the DRA manager runs
//	registered DRIVER SERVICE ENDPOINT     the DRA handler took a plugin (its chosen service)
//	unregistered DRIVER ENDPOINT           the plugin's registration socket went away
//	refused DRIVER ERROR                   the handler refused the plugin (what it is told)
//	deleted slices FIELDSELECTOR           the DRA manager wiped the node's ResourceSlices
//
// and, for the commands read on stdin, one answer each:
//
//	prepare NAMESPACE POD    -> "prepared NS/POD CLAIM:UID:DEVICES..."  (DEVICES: driver/pool/device,
//	                            comma-separated, or "-" when the driver delivered none)
//	unprepare NAMESPACE POD  -> "unprepared NS/POD"
//	health NAMESPACE POD     -> "health NS/POD ENTRY..." with what the DRA manager writes into
//	                            the pod's status.containerStatuses[].allocatedResourcesStatus
//	                            (UpdateAllocatedResourcesStatus), one ENTRY per device, sorted:
//	                            CONTAINER:RESOURCE:RESOURCEID=HEALTH, and :"MESSAGE" (Go-quoted)
//	                            where the kubelet gives a message; "health NS/POD -" for none
//	stop (or EOF, SIGTERM)   -> "stopped"
//
// A failed command answers "error MESSAGE" and the program carries on; a start that fails prints
// "error MESSAGE" and exits 1. The kubelet code's logs go to stderr.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// commandTimeout bounds one command; the kubelet's own call timeout to a plugin is 45 s.
const commandTimeout = 50 * time.Second

// maxLine bounds one command line: the longest valid one is a few hundred bytes.
const maxLine = 4096

// logVerbosity is the highest V level written: 4 adds the request and response of each call.
const logVerbosity = 5

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	node := flag.String("node", "", "the node this kubelet runs on (must exist)")
	registryDir := flag.String("registry-dir", "", "the plugins_registry directory to watch (created)")
	stateDir := flag.String("state-dir", "", "where the DRA manager checkpoints its claims (created)")
	services := flag.String("services", "", "DRA services this kubelet knows, comma-separated (default: the release's)")
	gates := flag.String("feature-gates", "", "the kubelet's feature gates, as its --feature-gates flag takes them")
	flag.CommandLine.SetOutput(io.Discard)
	err := flag.CommandLine.Parse(os.Args[1:])
	if err == nil && (*kubeconfig == "" || *node == "" || *registryDir == "" || *stateDir == "" || flag.NArg() > 0) {
		err = errors.New("--kubeconfig, --node, --registry-dir and --state-dir are required, and nothing else")
	}
	if err != nil {
		fail(fmt.Errorf("%w (hint: kubelet --kubeconfig FILE --node NAME --registry-dir DIR --state-dir DIR [--services v1beta1.DRAPlugin])", err))
	}
	if *gates != "" {
		// Before the DRA manager exists: its plugin manager reads the gates as it registers.
		if err := utilfeature.DefaultMutableFeatureGate.Set(*gates); err != nil {
			fail(fmt.Errorf("--feature-gates %q: %w", *gates, err))
		}
	}
	var known []string
	if *services != "" {
		known = strings.Split(*services, ",")
	}
	os.Exit(serve(*kubeconfig, *node, *registryDir, *stateDir, known))
}

// out serialises stdout: events come from the kubelet code's goroutines, answers from the loop.
var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

func fail(err error) {
	say("error %s", oneLine(err.Error()))
	fmt.Fprintf(os.Stderr, "error: %s\n", err)
	os.Exit(1)
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func serve(kubeconfig, node, registryDir, stateDir string, known []string) int {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fail(fmt.Errorf("read %s: %w", kubeconfig, err))
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		fail(fmt.Errorf("client for %s: %w", restConfig.Host, err))
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		fail(fmt.Errorf("create %s: %w", stateDir, err))
	}

	// The kubelet code logs through the context's logger; ours also turns its statements about
	// registrations and wiped slices into events.
	logger := logr.New(&eventSink{})
	klog.SetLogger(logger)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()

	manager, err := dra.NewManager(logger, client, stateDir)
	if err != nil {
		fail(fmt.Errorf("DRA manager: %w", err))
	}
	getNode := func(ctx context.Context) (*v1.Node, error) {
		getCtx, done := context.WithTimeout(ctx, 10*time.Second)
		defer done()
		return client.CoreV1().Nodes().Get(getCtx, node, metav1.GetOptions{})
	}
	// Never ready: the reconcile loop would unprepare the claims of every pod it does not see
	// running, and no pod runs here.
	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return false })
	activePods := func() []*v1.Pod { return nil }
	// Start begins with the wipe of all the node's slices, as a kubelet does at its start.
	if err := manager.Start(ctx, activePods, nodeGetter(ctx, getNode), sourcesReady); err != nil {
		fail(fmt.Errorf("start the DRA manager: %w", err))
	}

	plugins := pluginmanager.NewPluginManager(registryDir, &record.FakeRecorder{})
	plugins.AddHandler(pluginwatcherapi.DRAPlugin, &handler{inner: manager.GetWatcherHandler(), known: known})
	stop := make(chan struct{})
	go runPlugins(ctx, plugins, sourcesReady, stop)
	say("ready")

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	lines := make(chan string)
	go readLines(os.Stdin, lines)
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok || line == "stop" {
				break loop
			}
			say("%s", run(ctx, client, manager, line))
		case <-signals:
			break loop
		}
	}
	close(stop)
	cancel()
	say("stopped")
	return 0
}

func readLines(r io.Reader, lines chan<- string) {
	defer close(lines)
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, maxLine), maxLine)
	for scanner.Scan() {
		lines <- scanner.Text()
	}
}

var errUsage = errors.New("unknown command (hint: prepare NAMESPACE POD | unprepare NAMESPACE POD | health NAMESPACE POD | stop)")

// run executes one command line and returns its answer.
func run(ctx context.Context, client kubernetes.Interface, manager *dra.Manager, line string) string {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	words := strings.Fields(line)
	if len(words) != 3 || (words[0] != "prepare" && words[0] != "unprepare" && words[0] != "health") {
		return "error " + fmt.Sprintf("%q: %s", line, errUsage)
	}
	pod, err := client.CoreV1().Pods(words[1]).Get(ctx, words[2], metav1.GetOptions{})
	if err != nil {
		return "error " + oneLine(fmt.Sprintf("%s: get pod %s/%s: %s", words[0], words[1], words[2], err))
	}
	who := pod.Namespace + "/" + pod.Name
	if words[0] == "health" {
		return health(ctx, manager, pod)
	}
	if words[0] == "unprepare" {
		if err := manager.UnprepareResources(ctx, pod); err != nil {
			return "error " + oneLine(fmt.Sprintf("unprepare %s: %s", who, err))
		}
		// What the kubelet checks before it lets the pod go.
		if manager.PodMightNeedToUnprepareResources(pod.UID) {
			return "error " + fmt.Sprintf("unprepare %s: the DRA manager still holds claims of the pod", who)
		}
		return "unprepared " + who
	}
	if err := manager.PrepareResources(ctx, pod); err != nil {
		return "error " + oneLine(fmt.Sprintf("prepare %s: %s", who, err))
	}
	return prepared(manager, pod)
}

// prepared describes what the DRA manager holds for the pod's containers after a prepare: each
// claim once, with the devices its drivers answered.
func prepared(manager *dra.Manager, pod *v1.Pod) string {
	answer := "prepared " + pod.Namespace + "/" + pod.Name
	seen := sets.New[string]()
	for i := range pod.Spec.Containers {
		infos, err := manager.GetContainerClaimInfos(pod, &pod.Spec.Containers[i])
		if err != nil {
			return "error " + oneLine(fmt.Sprintf("prepare %s/%s: claim infos: %s", pod.Namespace, pod.Name, err))
		}
		for _, info := range infos {
			if seen.Has(info.ClaimName) {
				continue
			}
			seen.Insert(info.ClaimName)
			var devices []string
			for driver, state := range info.DriverState {
				for _, d := range state.Devices {
					devices = append(devices, driver+"/"+d.PoolName+"/"+d.DeviceName)
				}
			}
			slices.Sort(devices)
			list := strings.Join(devices, ",")
			if list == "" {
				list = "-"
			}
			answer += fmt.Sprintf(" %s:%s:%s", info.ClaimName, info.ClaimUID, list)
		}
	}
	return answer
}

// health is what the kubelet's status manager would write into the pod's container statuses:
// the DRA manager fills allocatedResourcesStatus from the health its plugins streamed.
func health(ctx context.Context, manager *dra.Manager, pod *v1.Pod) string {
	status := &v1.PodStatus{}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	updateHealth(ctx, manager, pod, status)
	var entries []string
	for _, c := range status.ContainerStatuses {
		for _, resource := range c.AllocatedResourcesStatus {
			for _, h := range resource.Resources {
				entry := fmt.Sprintf("%s:%s:%s=%s", c.Name, resource.Name, h.ResourceID, h.Health)
				if message, ok := healthMessage(h); ok {
					entry += ":" + strconv.Quote(message)
				}
				entries = append(entries, entry)
			}
		}
	}
	slices.Sort(entries)
	if len(entries) == 0 {
		entries = []string{"-"}
	}
	return "health " + pod.Namespace + "/" + pod.Name + " " + strings.Join(entries, " ")
}

// handler is the DRA manager's plugin handler, with the advertised services cut to --services
// and its verdicts reported. The registrations themselves are the manager's own.
type handler struct {
	inner cache.PluginHandler
	known []string
}

func (h *handler) services(versions []string) []string {
	if h.known == nil {
		return versions
	}
	var kept []string
	for _, v := range versions {
		if slices.Contains(h.known, v) {
			kept = append(kept, v)
		}
	}
	return kept
}

// verdict reports a refusal and passes it on; the methods that call it are per release.
func (h *handler) verdict(name string, err error) error {
	if err != nil {
		say("refused %s %s", name, oneLine(err.Error()))
	}
	return err
}

// eventSink writes the kubelet code's log to stderr and turns three of its statements into
// events: these messages are the DRA plugin manager's own (cm/dra/plugin/dra_plugin_manager.go),
// so a release that rewords them fails the tests instead of passing them silently.
type eventSink struct {
	name   string
	values []any
}

func (s *eventSink) Init(logr.RuntimeInfo)  {}
func (s *eventSink) Enabled(level int) bool { return level <= logVerbosity }

func (s *eventSink) Info(level int, msg string, kv ...any) {
	all := append(slices.Clone(s.values), kv...)
	fmt.Fprintf(os.Stderr, "%s I %s %q %s\n", time.Now().Format("15:04:05.000"), s.name, msg, render(all))
	switch msg {
	case "Registered DRA plugin":
		say("registered %s %s %s", value(all, "driverName"), value(all, "chosenService"), value(all, "endpoint"))
	case "Unregistered DRA plugin":
		say("unregistered %s %s", value(all, "driverName"), value(all, "endpoint"))
	case "Deleted ResourceSlices":
		say("deleted slices %s", value(all, "fieldSelector"))
	}
}

func (s *eventSink) Error(err error, msg string, kv ...any) {
	all := append(slices.Clone(s.values), kv...)
	fmt.Fprintf(os.Stderr, "%s E %s %q err=%q %s\n", time.Now().Format("15:04:05.000"), s.name, msg, err, render(all))
}

func (s *eventSink) WithValues(kv ...any) logr.LogSink {
	return &eventSink{name: s.name, values: append(slices.Clone(s.values), kv...)}
}

func (s *eventSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &eventSink{name: name, values: s.values}
}

// value is the last value logged under key (a later WithValues overrides an earlier one).
func value(kv []any, key string) string {
	found := "-"
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			found = fmt.Sprint(kv[i+1]) // fields.Set and klog's refs are Stringers
		}
	}
	return found
}

func render(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%v=%q ", kv[i], fmt.Sprint(kv[i+1]))
	}
	return strings.TrimSpace(b.String())
}
