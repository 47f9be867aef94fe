package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// adminTLS is a TLS config that trusts the cluster CA and presents the
// admin certificate, for readiness probes before a client exists.
func (c *Cluster) adminTLS() (*tls.Config, error) {
	p := c.pki()
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// pollHTTP polls url until it answers 200, the process exits, ctx ends or
// timeout passes, and says which.
func pollHTTP(ctx context.Context, p *Process, url string, tlsCfg *tls.Config, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		if p.exited() {
			return &exitedEarlyError{name: p.name, url: url, err: p.err, tail: p.logTail(8)}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %s: %w", p.name, timeout, url, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ensureNodes creates the cluster's fake nodes (they survive restarts in
// etcd, so existing ones are left as they are).
func (c *Cluster) ensureNodes(ctx context.Context) error {
	cs, err := c.clientset()
	if err != nil {
		return err
	}
	for i, n := range c.nodeSpecs() {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        n.Name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{
					"kubernetes.io/hostname": n.Name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
					"type":                   "kwok",
				},
			},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{},
				Capacity:    corev1.ResourceList{},
			},
		}
		for k, v := range map[string]string{LabelRegion: c.Spec.Region, LabelZone: c.Spec.Zone, LabelProvider: c.Spec.Provider} {
			if v != "" {
				node.Labels[k] = v
			}
		}
		for name, q := range map[corev1.ResourceName]string{corev1.ResourceCPU: n.CPU, corev1.ResourceMemory: n.Memory, corev1.ResourcePods: n.Pods} {
			qty, err := resource.ParseQuantity(q)
			if err != nil {
				return fmt.Errorf("node %d of %s: %s %q: %w", i, c.Spec.Name, name, q, err)
			}
			node.Status.Allocatable[name] = qty
			node.Status.Capacity[name] = qty
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", n.Name, err)
		}
	}
	return nil
}

// nodeSpecs returns the nodes with defaults filled in.
func (c *Cluster) nodeSpecs() []NodeSpec {
	nodes := c.Spec.Nodes
	if len(nodes) == 0 {
		nodes = []NodeSpec{{}}
	}
	out := make([]NodeSpec, len(nodes))
	for i, n := range nodes {
		if n.Name == "" {
			n.Name = fmt.Sprintf("%s-node-%d", c.Spec.Name, i)
		}
		if n.CPU == "" {
			n.CPU = "8"
		}
		if n.Memory == "" {
			n.Memory = "32Gi"
		}
		if n.Pods == "" {
			n.Pods = "110"
		}
		out[i] = n
	}
	return out
}

func (c *Cluster) clientset() (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// waitReady waits until the cluster can run workloads: for members every
// fake node Ready, and for every cluster the default namespace's service
// account (pods are refused until it exists).
func (c *Cluster) waitReady(ctx context.Context) error {
	cs, err := c.clientset()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for {
		last = c.checkReady(ctx, cs)
		if last == nil {
			return nil
		}
		for _, p := range c.procsSnapshot() {
			// kwok is restarted by its watcher (see startKwok).
			if p.exited() && p.name != "kwok" {
				return fmt.Errorf("%s exited: %v", p.name, p.err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster %s not ready after 90s: %w", c.Spec.Name, last)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) checkReady(ctx context.Context, cs *kubernetes.Clientset) error {
	if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return fmt.Errorf("default service account: %w", err)
	}
	if !c.Spec.Workloads {
		return nil
	}
	for _, n := range c.nodeSpecs() {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s is not Ready yet", n.Name)
		}
	}
	return nil
}

func (c *Cluster) procsSnapshot() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.procs...)
}

// ServiceAccountKubeconfig creates service account namespace/name (and
// its namespace) if missing and writes a kubeconfig that authenticates as
// it with a token valid for a day, so a test can run a component with
// exactly the RBAC it ships with. It returns the kubeconfig's path.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	cs, err := c.clientset()
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	seconds := int64(24 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	ca, err := os.ReadFile(c.pki().path("ca.crt"))
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.Host(), CertificateAuthorityData: ca}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "sa"
	path := filepath.Join(c.Dir, "kubeconfig-"+namespace+"-"+name)
	return path, clientcmd.WriteToFile(*kc, path)
}

// exitedEarlyError is a process that ended before it answered; it carries
// the end of the process's log, which says why.
type exitedEarlyError struct {
	name, url string
	err       error
	tail      string
}

func (e *exitedEarlyError) Error() string {
	return fmt.Sprintf("%s exited before %s answered: %v; its log ends with:\n%s", e.name, e.url, e.err, e.tail)
}

// portTaken reports whether the process died because a port it was given
// was taken between choosing it and binding it.
func (e *exitedEarlyError) portTaken() bool {
	return strings.Contains(e.tail, "address already in use")
}
