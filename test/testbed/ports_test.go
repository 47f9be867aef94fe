package testbed

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFirstStartChoosesNewPortsWhenOneIsTaken hands a cluster an apiserver
// port that another listener holds (what happens when something binds a
// chosen port before kube-apiserver does) and checks that the first start
// notices from the apiserver's own log, picks new ports and comes up.
func TestFirstStartChoosesNewPortsWhenOneIsTaken(t *testing.T) {
	bin := DefaultBinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("testbed binary %s missing in %s: run `make testbed-bin` (%v)", b, bin, err)
		}
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port

	calls := 0
	choosePorts = func(n int) ([]int, error) {
		calls++
		ports, err := FreePorts(n)
		if err != nil || calls > 1 {
			return ports, err
		}
		ports[n-1] = taken // the apiserver's port
		return ports, nil
	}
	defer func() { choosePorts = FreePorts }()

	var progress bytes.Buffer
	c := newCluster(ClusterSpec{Name: "ports"}, Config{Dir: t.TempDir(), BinDir: bin, Progress: &progress})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("the cluster did not start on new ports: %v\nprogress:\n%s", err, progress.String())
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	}()
	if calls != 2 {
		t.Errorf("ports were chosen %d times, want 2 (once, then again after the apiserver found its port taken)", calls)
	}
	if c.apiPort == taken {
		t.Errorf("the apiserver still has the taken port %d", taken)
	}
	if !strings.Contains(progress.String(), "found its port taken") {
		t.Errorf("progress does not say the port was taken:\n%s", progress.String())
	}
	cfg, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), c.Host()) {
		t.Errorf("the kubeconfig does not point at the new address %s", c.Host())
	}
}
