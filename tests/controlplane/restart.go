package main

// kube-apiserver stopped and started again on the same port and the same etcd, as when a
// control-plane node reboots or its static pod is replaced: the tests' clients see connections
// refused, then the same cluster (objects, resource versions, keys) at the same URL.
//
//	apiserver stop    -> "apiserver stopped"   once Run has returned (the port is closed)
//	apiserver start   -> "apiserver started"   once /readyz is ok again

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// apiStart is what starting kube-apiserver again needs.
type apiStart struct {
	ctx     context.Context
	port    int
	etcdURL string
	f       files
	gates   string
	// runtimeConfig is kube-apiserver's --runtime-config (API versions off by default).
	runtimeConfig string
	timeout       time.Duration
}

// apiRun is one run of kube-apiserver.
type apiRun struct {
	cancel context.CancelFunc
	exited chan struct{} // closed once Run has returned; err holds its result
	err    error
	// planned: stopped by a command, so its end is not the component dying.
	planned atomic.Bool
}

// run starts kube-apiserver on listener; an end that no command asked for is sent to died.
func (s apiStart) run(listener net.Listener, died chan<- error) (*apiRun, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	done, err := startAPIServer(ctx, listener, s.etcdURL, s.f, s.gates, s.runtimeConfig)
	if err != nil {
		cancel()
		return nil, err
	}
	r := &apiRun{cancel: cancel, exited: make(chan struct{})}
	go func() {
		r.err = <-done
		close(r.exited)
		if !r.planned.Load() {
			err := r.err
			if err == nil {
				err = errors.New("returned")
			}
			died <- fmt.Errorf("kube-apiserver stopped: %w", err)
		}
	}()
	return r, nil
}

// stop cancels the run and waits for it until deadline fires; false if it did not end.
func (r *apiRun) stop(deadline <-chan time.Time) bool {
	r.planned.Store(true)
	r.cancel()
	select {
	case <-r.exited:
		return true
	case <-deadline:
		return false
	}
}

// apiserverCommand runs `apiserver stop|start`; ok is false for any other line.
func (c *cluster) apiserverCommand(line string) (answer string, ok bool) {
	words := strings.Fields(line)
	if len(words) == 0 || words[0] != "apiserver" {
		return "", false
	}
	var err error
	switch {
	case len(words) == 2 && words[1] == "stop":
		err = c.stopAPIServer()
	case len(words) == 2 && words[1] == "start":
		err = c.startAPIServer()
	default:
		err = fmt.Errorf("%q: unknown command (hint: apiserver stop | apiserver start)", line)
	}
	if err != nil {
		return "error " + strings.ReplaceAll(err.Error(), "\n", " "), true
	}
	return "apiserver " + map[string]string{"stop": "stopped", "start": "started"}[words[1]], true
}

func (c *cluster) stopAPIServer() error {
	select {
	case <-c.api.exited:
		return errors.New("apiserver stop: it is not running (hint: apiserver start)")
	default:
	}
	if !c.api.stop(time.After(stopTimeout)) {
		return fmt.Errorf("apiserver stop: kube-apiserver did not stop within %s", stopTimeout)
	}
	return nil
}

func (c *cluster) startAPIServer() error {
	select {
	case <-c.api.exited:
	default:
		return errors.New("apiserver start: it is running (hint: apiserver stop first)")
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.apiStart.port)))
	if err != nil {
		return fmt.Errorf("apiserver start: listen on 127.0.0.1:%d: %w (hint: something took the port while it was stopped)", c.apiStart.port, err)
	}
	run, err := c.apiStart.run(listener, c.died)
	if err != nil {
		listener.Close()
		return fmt.Errorf("apiserver start: %w", err)
	}
	c.api = run
	return c.await(c.apiStart.ctx, time.Now().Add(c.apiStart.timeout), "kube-apiserver /readyz", c.apiReady)
}
