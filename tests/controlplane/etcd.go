package main

// etcd in process (go.etcd.io/etcd/server/v3/embed), as k8s.io/apiserver's etcd3/testserver
// runs it: one member, no fsync (nothing outlives the run), data under the state directory.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdReadyTimeout bounds the wait for etcd's first leader.
const etcdReadyTimeout = 60 * time.Second

// etcdAttempts: embed takes URLs, not listeners, so a free port can be taken by another process
// between choosing it and binding it; a second choice almost always works.
const etcdAttempts = 3

func startEtcd(dir string) (*embed.Etcd, string, error) {
	var lastErr error
	for attempt := 0; attempt < etcdAttempts; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return nil, "", err
		}
		cfg := embed.NewConfig()
		cfg.Name = "controlplane"
		cfg.Dir = filepath.Join(dir, "etcd")
		cfg.UnsafeNoFsync = true
		cfg.LogLevel = "error"
		client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
		peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err := embed.StartEtcd(cfg)
		if errors.Is(err, syscall.EADDRINUSE) {
			lastErr = err
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("start etcd: %w", err)
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, client.String(), nil
		case err := <-e.Err():
			e.Close()
			return nil, "", fmt.Errorf("etcd stopped while starting: %w", err)
		case <-time.After(etcdReadyTimeout):
			e.Close()
			return nil, "", fmt.Errorf("etcd not ready after %s (hint: the machine may be overloaded, or %s not writable)", etcdReadyTimeout, cfg.Dir)
		}
	}
	return nil, "", fmt.Errorf("start etcd: %w (hint: %d tries found no free port pair on 127.0.0.1)", lastErr, etcdAttempts)
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
