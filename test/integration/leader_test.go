package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
	localfleet "github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// buildBinary builds ./<pkg> of the repository into a temporary folder.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-tags", localfleet.BuildTags, "-o", out, "./"+pkg)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

// startProcess starts bin with the testbed's process handling (its own
// process group, killed by the kernel if the test process dies) and stops
// it by PID when the test ends, showing its last output if the test failed.
func startProcess(t *testing.T, logPath, bin string, args ...string) *testbed.Process {
	return startProcessEnv(t, logPath, bin, nil, args...)
}

func startProcessEnv(t *testing.T, logPath, bin string, env []string, args ...string) *testbed.Process {
	t.Helper()
	p, err := testbed.StartProcess(filepath.Base(bin), bin, args, env, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("stopping %s: %v", filepath.Base(bin), err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("last output of %s:\n%s", filepath.Base(bin), b)
			}
		}
	})
	return p
}

var (
	scrape   = localfleet.Scrape
	isLeader = localfleet.IsLeader
)

func reconciled(metrics string) bool {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, `controller_runtime_reconcile_total{controller="myapp"`) && !strings.HasSuffix(line, " 0") {
			return true
		}
	}
	return false
}

// TestTwoHubReplicasOnlyLeaderReconciles runs two hub processes with leader
// election against one hub apiserver, as the service account with the RBAC
// deploy/hub ships: only the leader reconciles; when it is killed, the other
// takes over and reconciles new MyApps.
func TestTwoHubReplicasOnlyLeaderReconciles(t *testing.T) {
	c, _, hubCluster := startTestbedHub(t)
	ctx := context.Background()
	bin := buildBinary(t, "hub")
	certDir := hubCerts(t)
	// The hubs run as the service account with the RBAC deploy/hub ships.
	kubeconfig := kubeconfigWithShippedRBAC(t, c, hubCluster, deployrbac.Hub, "flotilla-hub")
	type replica struct {
		proc    *testbed.Process
		metrics string
	}
	var replicas []*replica
	for i := range 2 {
		metricsAddr := freeAddr(t)
		p := startProcess(t, filepath.Join(t.TempDir(), fmt.Sprintf("hub-%d.log", i)), bin,
			"--kubeconfig", kubeconfig,
			"--leader-elect=true",
			// Plain HTTP: the test scrapes it to find the leader.
			"--metrics-bind-address", metricsAddr, "--metrics-secure=false",
			"--health-probe-bind-address", freeAddr(t),
			"--sync-bind-address", freeAddr(t),
			"--webhook-bind-address", "",
			"--cert-dir", certDir,
		)
		replicas = append(replicas, &replica{proc: p, metrics: metricsAddr})
	}

	var leader, standby *replica
	eventually(t, "one hub replica leading", 60*time.Second, func() error {
		leaders := 0
		for _, r := range replicas {
			if isLeader(scrape(r.metrics)) {
				leaders++
				leader = r
			} else {
				standby = r
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d leaders", leaders)
		}
		return nil
	})

	scheduledCondition := func(name string) func() error {
		return func() error {
			app := &flotillav1.MyApp{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, app); err != nil {
				return err
			}
			if meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionScheduled) == nil {
				return fmt.Errorf("no Scheduled condition yet")
			}
			return nil
		}
	}
	// No member is Ready, so the MyApp is reconciled into Unschedulable:
	// the status shows a reconcile happened.
	if err := c.Create(ctx, newApp("first", 1, flotillav1.Placement{})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the leader reconciling MyApp first", 30*time.Second, scheduledCondition("first"))
	if !reconciled(scrape(leader.metrics)) {
		t.Fatalf("the leader's metrics show no MyApp reconcile")
	}
	if m := scrape(standby.metrics); m == "" || reconciled(m) {
		t.Fatalf("the standby replica reconciled (or did not answer): leader election is not holding it back")
	}

	if err := leader.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the standby taking over leadership", 60*time.Second, func() error {
		if !isLeader(scrape(standby.metrics)) {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	if err := c.Create(ctx, newApp("second", 1, flotillav1.Placement{})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new leader reconciling MyApp second", 30*time.Second, scheduledCondition("second"))
}

// TestHubLostLeaseStartsOverInPlace runs one hub process with leader
// election and gives its Lease to another holder: the hub must not exit
// but start over in place (the same process, counted in
// flotilla_lost_lease_restarts_total), reconcile nothing while another
// holds the Lease, and reconcile again once the Lease is free.
func TestHubLostLeaseStartsOverInPlace(t *testing.T) {
	c, _, hubCluster := startTestbedHub(t)
	ctx := context.Background()
	bin := buildBinary(t, "hub")
	certDir := hubCerts(t)
	kubeconfig := kubeconfigWithShippedRBAC(t, c, hubCluster, deployrbac.Hub, "flotilla-hub")
	metricsAddr := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), "hub.log")
	proc := startProcess(t, logPath, bin, append([]string{
		"--kubeconfig", kubeconfig,
		"--leader-elect=true",
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address", freeAddr(t),
		"--sync-bind-address", freeAddr(t),
		"--webhook-bind-address", "",
		"--cert-dir", certDir,
	}, shortLease...)...)
	eventually(t, "the hub leading", 60*time.Second, leading(metricsAddr))
	if n, ok := lostLeaseRestarts(metricsAddr); !ok || n != 0 {
		t.Fatalf("a fresh hub serves flotilla_lost_lease_restarts_total %d (served: %v), want 0", n, ok)
	}

	leaseKey := client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: "flotilla-hub.flotilla.dev"}
	eventually(t, "taking the hub's Lease for another holder", 30*time.Second, setLeaseHolder(c, leaseKey, "thief", time.Now(), 3600))
	eventually(t, "the hub starting over in place after it lost its Lease (flotilla_lost_lease_restarts_total 1)", 60*time.Second, func() error {
		select {
		case <-proc.Done():
			return fmt.Errorf("the hub process exited")
		default:
		}
		if n, ok := lostLeaseRestarts(metricsAddr); !ok || n != 1 {
			return fmt.Errorf("flotilla_lost_lease_restarts_total %d (served: %v)", n, ok)
		}
		return nil
	})
	if b, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(b), "lost the leader Lease: starting over in place") {
		t.Fatalf("the hub's log does not say it started over in place (read error %v)", err)
	}

	// While another holds the Lease, nothing is reconciled.
	if err := c.Create(ctx, newApp("waits", 1, flotillav1.Placement{})); err != nil {
		t.Fatal(err)
	}
	scheduled := func() error {
		app := &flotillav1.MyApp{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "waits"}, app); err != nil {
			return err
		}
		if meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionScheduled) == nil {
			return fmt.Errorf("no Scheduled condition yet")
		}
		return nil
	}
	consistently(t, "MyApp waits unreconciled while another holds the hub's Lease", 2*time.Second, func() error {
		if scheduled() == nil {
			return fmt.Errorf("MyApp waits was reconciled by a hub that does not hold the Lease")
		}
		return nil
	})

	eventually(t, "freeing the hub's Lease", 30*time.Second, setLeaseHolder(c, leaseKey, "thief", time.Now().Add(-time.Hour), 3))
	eventually(t, "the restarted hub leading again", 60*time.Second, leading(metricsAddr))
	eventually(t, "the restarted hub reconciling MyApp waits", 30*time.Second, scheduled)
	select {
	case <-proc.Done():
		t.Fatal("the hub process exited")
	default:
	}
}

// kubeconfigWithShippedRBAC installs the RBAC deploy/<component> ships
// (the generated ClusterRole and Role, their bindings, read from the
// repository by deployrbac) and returns a kubeconfig that authenticates as
// service account flotilla-system/<name>, the bindings' subject: a
// component run with it has exactly the permissions it ships with, so a
// missing RBAC marker, or one namespaced too narrowly, fails the test.
func kubeconfigWithShippedRBAC(t *testing.T, c client.Client, cluster *testbed.Cluster, component deployrbac.Component, name string) string {
	t.Helper()
	ctx := context.Background()
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "flotilla-system", name)
	if err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Install(ctx, c, component); err != nil {
		t.Fatalf("installing deploy/%s's RBAC: %v", component, err)
	}
	return kubeconfig
}
