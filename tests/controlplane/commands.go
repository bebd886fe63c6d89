package main

// The commands the tests send on stdin, one a line, each answered by one line on stdout:
//
//	node NAME [KEY=VALUE...]   -> "node NAME"    a Ready node with these labels
//	token NS SA POD NODE       -> "token JWT"    a token of SA bound to pod POD on node NODE
//	stop                       -> "stopped"      (after a clean shutdown; also on EOF, SIGTERM)
//	apiserver stop|start       -> "apiserver stopped|started"   (restart.go)
//
// A failed command answers "error MESSAGE" and the harness carries on.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// commandTimeout bounds one command's requests.
const commandTimeout = 30 * time.Second

// tokenLifetime: a test run is shorter; the API server's minimum is 10 minutes.
const tokenLifetime = int64(3600)

// pauseImage never runs (there is no kubelet); the pod only has to be valid.
const pauseImage = "registry.k8s.io/pause:3.10"

var errUsage = errors.New("unknown command (hint: node NAME [KEY=VALUE...] | token NAMESPACE SERVICEACCOUNT POD NODE | stop)")

// run executes one command line and returns its answer (without the newline).
func run(ctx context.Context, client kubernetes.Interface, line string) string {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	words := strings.Fields(line)
	var answer string
	var err error
	switch {
	case len(words) >= 2 && words[0] == "node":
		err = createNode(ctx, client, words[1], words[2:])
		answer = "node " + words[1]
	case len(words) == 5 && words[0] == "token":
		answer, err = boundToken(ctx, client, words[1], words[2], words[3], words[4])
		answer = "token " + answer
	default:
		err = fmt.Errorf("%q: %w", line, errUsage)
	}
	if err != nil {
		return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return answer
}

// createNode creates a node as a kubelet registers one: labels, then capacity and a Ready
// condition through the status subresource. TaintNodesByCondition admission gives every new node
// the not-ready taint, which the node lifecycle controller lifts once the node reports Ready;
// that controller does not run here (no kubelet heartbeats), so this lifts it the same way.
func createNode(ctx context.Context, client kubernetes.Interface, name string, labelArgs []string) error {
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for _, arg := range labelArgs {
		key, value, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("node %s: label %q is not KEY=VALUE", name, arg)
		}
		labels[key] = value
	}
	nodes := client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
	}
	node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("mark node %s ready: %w", name, err)
	}
	var kept []corev1.Taint
	for _, taint := range node.Spec.Taints {
		if taint.Key != corev1.TaintNodeNotReady {
			kept = append(kept, taint)
		}
	}
	if len(kept) != len(node.Spec.Taints) {
		node.Spec.Taints = kept
		if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("lift the not-ready taint of node %s: %w", name, err)
		}
	}
	return nil
}

// boundToken returns a TokenRequest token of namespace/sa bound to pod, which runs on node:
// the API server then writes the node's name into the token and into the user info of its
// requests (authentication.kubernetes.io/node-name). The service account and the pod are
// created when missing; an existing pod must already be on node.
func boundToken(ctx context.Context, client kubernetes.Interface, namespace, sa, podName, nodeName string) (string, error) {
	if _, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err != nil {
		return "", fmt.Errorf("token: node %s: %w (hint: send `node %s` first)", nodeName, err, nodeName)
	}
	accounts := client.CoreV1().ServiceAccounts(namespace)
	_, err := accounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("token: create service account %s/%s: %w", namespace, sa, err)
	}
	pods := client.CoreV1().Pods(namespace)
	pod, err := pods.Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pod, err = pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName},
			Spec: corev1.PodSpec{
				NodeName:           nodeName,
				ServiceAccountName: sa,
				Containers:         []corev1.Container{{Name: "pause", Image: pauseImage}},
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("token: pod %s/%s: %w", namespace, podName, err)
	}
	if pod.Spec.NodeName != nodeName || pod.Spec.ServiceAccountName != sa {
		return "", fmt.Errorf("token: pod %s/%s runs as %s on node %q, not as %s on %s (hint: name another pod)",
			namespace, podName, pod.Spec.ServiceAccountName, pod.Spec.NodeName, sa, nodeName)
	}
	lifetime := tokenLifetime
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &lifetime,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	token, err := accounts.CreateToken(ctx, sa, request, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token: request a token of %s/%s: %w", namespace, sa, err)
	}
	return token.Status.Token, nil
}
