// Command controlplane runs a Kubernetes control plane in one process for the integration
// tests: embedded etcd, kube-apiserver, kube-scheduler and the kube-controller-manager
// controllers the flows need, built from the official modules of the release go.mod pins.
//
//	controlplane --dir DIR [--port N] [--start-timeout D]
//
// DIR (created; must be new or empty) receives admin.kubeconfig, the keys, etcd's data and
// kube-apiserver's audit log (audit.log, see apiserver.go), and is removed on stop. stdout carries one line per event: "ready URL" once /readyz is ok, the
// scheduler's informers have synced and the controllers run; then the answers to the commands of
// commands.go and restart.go. A start that fails prints "error MESSAGE" and exits 1. The components' logs go
// to stderr.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// stopTimeout bounds the drain after stop; what has not stopped by then dies with the process.
const stopTimeout = 30 * time.Second

// maxLine bounds one command line: the longest valid one is a few hundred bytes.
const maxLine = 4096

// pollInterval is how often readiness is asked while starting.
const pollInterval = 100 * time.Millisecond

func main() {
	dir := flag.String("dir", "", "state directory (created; must be new or empty; removed on stop)")
	port := flag.Int("port", 0, "kube-apiserver port on 127.0.0.1 (0: a free one)")
	startTimeout := flag.Duration("start-timeout", 3*time.Minute, "how long the start may take")
	// One registry holds the gates for the whole process: the scheduler and the controllers
	// see what kube-apiserver's --feature-gates set.
	gates := flag.String("feature-gates", "", "kube-apiserver's --feature-gates (KEY=BOOL,...), for every component")
	runtimeConfig := flag.String("runtime-config", "", "kube-apiserver's --runtime-config (GROUP/VERSION=BOOL,...): API versions off by default")
	flag.CommandLine.SetOutput(io.Discard)
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil || *dir == "" || flag.NArg() > 0 {
		if err == nil {
			err = errors.New("--dir is required and nothing else")
		}
		fail(fmt.Errorf("%w (hint: controlplane --dir DIR [--port N] [--start-timeout 3m] [--feature-gates KEY=BOOL,...] [--runtime-config GROUP/VERSION=BOOL,...])", err))
	}
	if err := prepareDir(*dir); err != nil {
		fail(err)
	}
	os.Exit(serve(*dir, *port, *startTimeout, *gates, *runtimeConfig))
}

// fail reports a start that failed, on both streams: stdout for the tests' protocol, stderr
// after the logs for a person.
func fail(err error) {
	fmt.Printf("error %s\n", err)
	fmt.Fprintf(os.Stderr, "error: %s\n", err)
	os.Exit(1)
}

func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty (hint: give a new directory: it is removed on stop)", dir)
	}
	return nil
}

// serve starts everything, answers commands until stop, EOF or a signal, and stops.
func serve(dir string, port int, startTimeout time.Duration, gates, runtimeConfig string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	began := time.Now()
	c, err := start(ctx, dir, port, startTimeout, gates, runtimeConfig)
	if err != nil {
		if c != nil {
			c.stop()
		}
		os.RemoveAll(dir)
		fail(err)
	}
	klog.Infof("controlplane: ready in %s", time.Since(began).Round(time.Millisecond))
	fmt.Printf("ready %s\n", c.serverURL)

	lines := make(chan string)
	go readLines(os.Stdin, lines)
	code := 0
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok || line == "stop" {
				break loop
			}
			if answer, ok := c.apiserverCommand(line); ok {
				fmt.Println(answer)
				continue
			}
			fmt.Println(run(ctx, c.client, line))
		case sig := <-signals:
			klog.Infof("controlplane: %s, stopping", sig)
			break loop
		case err := <-c.died:
			fmt.Printf("error %s\n", err)
			fmt.Fprintf(os.Stderr, "error: %s\n", err)
			code = 1
			break loop
		}
	}
	if err := c.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %s\n", err)
		code = 1
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "error: remove %s: %s\n", dir, err)
		code = 1
	}
	fmt.Println("stopped")
	return code
}

// readLines sends stdin's lines until EOF or a line longer than maxLine (which ends the input:
// the protocol has no such line, so the writer is not one of ours).
func readLines(r io.Reader, out chan<- string) {
	defer close(out)
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, maxLine), maxLine)
	for scanner.Scan() {
		out <- scanner.Text()
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "error: read stdin: %s\n", err)
	}
}

// cluster is what runs, for stop to take down in order.
type cluster struct {
	cancel    context.CancelFunc
	running   []component
	died      chan error
	stopEtcd  func()
	client    kubernetes.Interface
	serverURL string
	// api is kube-apiserver's current run, apart from running: the apiserver commands stop it
	// and start it again (restart.go).
	api      *apiRun
	apiStart apiStart
}

type component struct {
	name string
	done chan error
}

// start brings the control plane up in order, each part waiting for the one it needs. On error
// the returned cluster (if any) holds what started, for stop.
func start(ctx context.Context, dir string, port int, timeout time.Duration, gates, runtimeConfig string) (*cluster, error) {
	deadline := time.Now().Add(timeout)
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: listen on 127.0.0.1:%d: %w (hint: pass --port 0 for a free port, or stop what holds it)", port, err)
	}
	port = listener.Addr().(*net.TCPAddr).Port
	c := &cluster{serverURL: fmt.Sprintf("https://127.0.0.1:%d", port), died: make(chan error, 3)}
	f, err := writePKI(dir, c.serverURL)
	if err != nil {
		listener.Close()
		return nil, err
	}
	kcm, err := newControllerManager(f.adminKubeconfig)
	if err != nil {
		listener.Close()
		return nil, err
	}
	etcd, etcdURL, err := startEtcd(dir)
	if err != nil {
		listener.Close()
		return nil, err
	}
	c.stopEtcd = etcd.Close

	ctx, c.cancel = context.WithCancel(ctx)
	c.apiStart = apiStart{ctx: ctx, port: port, etcdURL: etcdURL, f: f, gates: gates, runtimeConfig: runtimeConfig, timeout: timeout}
	if err := writeAuditPolicy(f); err != nil {
		listener.Close()
		return c, err
	}
	if c.api, err = c.apiStart.run(listener, c.died); err != nil {
		listener.Close()
		return c, err
	}

	config, err := clientcmd.BuildConfigFromFlags("", f.adminKubeconfig)
	if err != nil {
		return c, fmt.Errorf("read %s: %w", f.adminKubeconfig, err)
	}
	c.client, err = kubernetes.NewForConfig(config)
	if err != nil {
		return c, fmt.Errorf("client for %s: %w", c.serverURL, err)
	}
	if err := c.await(ctx, deadline, "kube-apiserver /readyz", c.apiReady); err != nil {
		return c, err
	}

	sched := component{"kube-scheduler", make(chan error, 1)}
	readyz, err := startScheduler(ctx, dir, f.adminKubeconfig, sched.done)
	if err != nil {
		return c, err
	}
	c.running = append(c.running, sched)
	controllerManager := component{"kube-controller-manager", make(chan error, 1)}
	if err := kcm.start(ctx, controllerManager.done); err != nil {
		return c, err
	}
	c.running = append(c.running, controllerManager)

	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: insecureLoopback()}}
	if err := c.await(ctx, deadline, "kube-scheduler /readyz", func(ctx context.Context) bool {
		return schedulerReady(ctx, probe, readyz)
	}); err != nil {
		return c, err
	}
	// The controllers start before their informers, and the serviceaccount controller writes only
	// once its informers run: the default ServiceAccount means every controller has started.
	if err := c.await(ctx, deadline, "kube-controller-manager (the default ServiceAccount)", c.defaultServiceAccount); err != nil {
		return c, err
	}
	for _, comp := range c.running {
		go watchDeath(comp, c.died)
	}
	return c, nil
}

// watchDeath reports a component that stops on its own.
func watchDeath(comp component, died chan<- error) {
	err := <-comp.done
	if err == nil {
		err = errors.New("returned")
	}
	comp.done <- err // for stop, which waits on it too
	died <- fmt.Errorf("%s stopped: %w", comp.name, err)
}

// await polls ready until it holds, a component stops, or the deadline passes.
func (c *cluster) await(ctx context.Context, deadline time.Time, what string, ready func(context.Context) bool) error {
	for {
		select {
		case <-c.api.exited:
			return fmt.Errorf("kube-apiserver stopped while waiting for %s: %v", what, c.api.err)
		default:
		}
		for _, comp := range c.running {
			select {
			case err := <-comp.done:
				comp.done <- err // for stop, which waits on it too
				return fmt.Errorf("%s stopped while waiting for %s: %v", comp.name, what, err)
			default:
			}
		}
		probeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok := ready(probeCtx)
		cancel()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready before the start timeout (hint: raise --start-timeout on a loaded machine; the components' log is on stderr)", what)
		}
		time.Sleep(pollInterval)
	}
}

func (c *cluster) apiReady(ctx context.Context) bool {
	status := 0
	c.client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
	return status == http.StatusOK
}

func (c *cluster) defaultServiceAccount(ctx context.Context) bool {
	_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, corev1.NamespaceDefault, metav1.GetOptions{})
	return err == nil
}

// stop cancels every component, waits for each (bounded by stopTimeout in all), then closes etcd.
func (c *cluster) stop() error {
	if c.cancel != nil {
		c.cancel()
	}
	deadline := time.After(stopTimeout)
	var late []string
	// The API server last: the others' informers would log errors while it goes.
	for i := len(c.running) - 1; i >= 0; i-- {
		select {
		case <-c.running[i].done:
		case <-deadline:
			late = append(late, c.running[i].name)
		}
	}
	if c.api != nil && !c.api.stop(deadline) {
		late = append(late, "kube-apiserver")
	}
	if c.stopEtcd != nil {
		c.stopEtcd()
	}
	if len(late) > 0 {
		return fmt.Errorf("%v did not stop within %s", late, stopTimeout)
	}
	return nil
}
