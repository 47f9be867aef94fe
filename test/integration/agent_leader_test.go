package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// TestAgentLeaderFailover runs two agent processes for one member with
// leader election: the leader holds the stream; when it is killed the other
// takes over, the stream resumes (a scale on the hub reaches the member),
// and the member's Deployment is neither deleted nor recreated.
func TestAgentLeaderFailover(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	bin := buildBinary(t, "agent")
	// The agents run as the service account with the RBAC deploy/agent
	// ships.
	kubeconfig := kubeconfigWithShippedRBAC(t, f.members["member-1"], f.tb.Member("member-1"), deployrbac.Agent, "flotilla-agent")
	type replica struct {
		name    string
		proc    *testbed.Process
		metrics string
	}
	var replicas []*replica
	for i := range 2 {
		r := &replica{name: fmt.Sprintf("agent-%d", i), metrics: freeAddr(t)}
		r.proc = startProcessEnv(t, filepath.Join(t.TempDir(), r.name+".log"), bin, []string{"POD_NAME=" + r.name},
			leaderElectedAgentArgs(t, f, kubeconfig, syncAddr, r.metrics)...)
		replicas = append(replicas, r)
	}

	var leader, standby *replica
	eventually(t, "one agent replica leading", 60*time.Second, func() error {
		n := 0
		for _, r := range replicas {
			if isLeader(scrape(r.metrics)) {
				n++
				leader = r
			} else {
				standby = r
			}
		}
		if n != 1 {
			return fmt.Errorf("%d leaders", n)
		}
		return nil
	})
	connectedInstance := func(want string) func() error {
		return func() error {
			mc := &flotillav1.MemberCluster{}
			if err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, mc); err != nil {
				return err
			}
			if mc.Status.Agent == nil || mc.Status.Agent.Instance != want {
				return fmt.Errorf("agent %+v", mc.Status.Agent)
			}
			return nil
		}
	}
	eventually(t, "the hub seeing the leader "+leader.name+" connected", 30*time.Second, connectedInstance(leader.name))

	app := newApp("web", 2, flotillav1.Placement{})
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	replicasInMember := func(want int32) func() error {
		return func() error {
			d, err := f.deployment(ctx, "member-1", "default", "web")
			if err != nil {
				return err
			}
			if *d.Spec.Replicas != want || d.Status.ReadyReplicas != want {
				return fmt.Errorf("replicas %d, ready %d", *d.Spec.Replicas, d.Status.ReadyReplicas)
			}
			return nil
		}
	}
	eventually(t, "Deployment web with 2 ready replicas", 60*time.Second, replicasInMember(2))
	before, err := f.deployment(ctx, "member-1", "default", "web")
	if err != nil {
		t.Fatal(err)
	}

	if err := leader.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the standby "+standby.name+" leading", 60*time.Second, func() error {
		if !isLeader(scrape(standby.metrics)) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	eventually(t, "the hub seeing "+standby.name+" connected", 30*time.Second, connectedInstance(standby.name))

	// The stream resumed: a change on the hub reaches the member.
	scale := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`))
	if err := f.hub.Patch(ctx, app, scale); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scale to 4 reaching the member through the new leader", 60*time.Second, replicasInMember(4))
	after, err := f.deployment(ctx, "member-1", "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Fatalf("the Deployment was recreated across the agent failover: uid %s -> %s", before.UID, after.UID)
	}
}

// TestAgentLostLeaseStartsOverInPlace runs one agent process with leader
// election and takes its Lease away (another holder renews it, as a
// replica would after the leader's apiserver stalled past its renew
// deadline). The agent must not exit into a supervisor's back-off: the
// same process starts over in place (internal/reexec), counts it in
// flotilla_lost_lease_restarts_total, acts on nothing while another
// holds the Lease (a scale on the hub does not reach the member), and
// leads again once the Lease is free: the scale arrives and the
// member's Deployment is the same object throughout.
func TestAgentLostLeaseStartsOverInPlace(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	bin := buildBinary(t, "agent")
	kubeconfig := kubeconfigWithShippedRBAC(t, f.members["member-1"], f.tb.Member("member-1"), deployrbac.Agent, "flotilla-agent")
	metricsAddr := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), "agent.log")
	proc := startProcessEnv(t, logPath, bin, []string{"POD_NAME=agent-0"},
		append(leaderElectedAgentArgs(t, f, kubeconfig, syncAddr, metricsAddr), shortLease...)...)
	restarts := func() (int, bool) { return lostLeaseRestarts(metricsAddr) }
	eventually(t, "the agent leading", 60*time.Second, leading(metricsAddr))
	if n, ok := restarts(); !ok || n != 0 {
		t.Fatalf("a fresh agent serves flotilla_lost_lease_restarts_total %d (served: %v), want 0", n, ok)
	}

	app := newApp("web", 1, flotillav1.Placement{})
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	specReplicas := func(want int32) func() error {
		return func() error {
			d, err := f.deployment(ctx, "member-1", "default", "web")
			if err != nil {
				return err
			}
			if *d.Spec.Replicas != want {
				return fmt.Errorf("spec.replicas %d", *d.Spec.Replicas)
			}
			return nil
		}
	}
	eventually(t, "Deployment web with 1 replica in member-1", 60*time.Second, specReplicas(1))
	before, err := f.deployment(ctx, "member-1", "default", "web")
	if err != nil {
		t.Fatal(err)
	}

	// Another holder takes the Lease and keeps it renewed for an hour.
	leaseKey := client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: "flotilla-agent.flotilla.dev"}
	setHolder := func(holder string, renewed time.Time, seconds int32) func() error {
		return setLeaseHolder(f.members["member-1"], leaseKey, holder, renewed, seconds)
	}
	eventually(t, "taking the agent's Lease for another holder", 30*time.Second, setHolder("thief", time.Now(), 3600))
	pid := proc.Pid()
	eventually(t, "the agent starting over in place after it lost its Lease (flotilla_lost_lease_restarts_total 1)", 60*time.Second, func() error {
		select {
		case <-proc.Done():
			return fmt.Errorf("the agent process exited")
		default:
		}
		if n, ok := restarts(); !ok || n != 1 {
			return fmt.Errorf("flotilla_lost_lease_restarts_total %d (served: %v)", n, ok)
		}
		return nil
	})
	select {
	case <-proc.Done():
		t.Fatalf("the agent (pid %d) exited after it lost its Lease; it must start over in place", pid)
	default:
	}
	if b, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(b), "lost the leader Lease: starting over in place") {
		t.Fatalf("the agent's log does not say it started over in place (read error %v)", err)
	}

	// While another holds the Lease, the new process acts on nothing.
	scale := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))
	if err := f.hub.Patch(ctx, app, scale); err != nil {
		t.Fatal(err)
	}
	consistently(t, "member-1's Deployment kept at 1 replica while another holds the agent's Lease", 3*time.Second, func() error {
		if isLeader(scrape(metricsAddr)) {
			return fmt.Errorf("the restarted agent says it leads while the thief holds the Lease")
		}
		return specReplicas(1)()
	})

	// The Lease is free again (its last renewal an hour old): the same
	// process leads, and the scale arrives, on the same Deployment.
	eventually(t, "freeing the agent's Lease", 30*time.Second, setHolder("thief", time.Now().Add(-time.Hour), 3))
	eventually(t, "the restarted agent leading again", 60*time.Second, leading(metricsAddr))
	eventually(t, "the scale to 2 reaching member-1 through the restarted agent", 60*time.Second, specReplicas(2))
	after, err := f.deployment(ctx, "member-1", "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Fatalf("the Deployment was recreated across the in-place restart: uid %s -> %s", before.UID, after.UID)
	}
	if proc.Pid() != pid {
		t.Fatalf("pid %d -> %d", pid, proc.Pid())
	}
}

// lostLeaseRestarts reads flotilla_lost_lease_restarts_total from a hub's
// or agent's plain-HTTP /metrics at addr (false: not served).
func lostLeaseRestarts(addr string) (int, bool) {
	for _, line := range strings.Split(scrape(addr), "\n") {
		if v, ok := strings.CutPrefix(line, "flotilla_lost_lease_restarts_total "); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}

// setLeaseHolder returns a poll step that writes the Lease at key as held
// by holder, renewed at renewed for seconds (a conflict with the real
// holder's renewal is retried by the poll).
func setLeaseHolder(c client.Client, key client.ObjectKey, holder string, renewed time.Time, seconds int32) func() error {
	return func() error {
		l := &coordinationv1.Lease{}
		if err := c.Get(context.Background(), key, l); err != nil {
			return err
		}
		l.Spec.HolderIdentity = &holder
		l.Spec.LeaseDurationSeconds = &seconds
		at := metav1.NewMicroTime(renewed)
		l.Spec.RenewTime, l.Spec.AcquireTime = &at, &at
		return c.Update(context.Background(), l)
	}
}

// leaderElectedAgentArgs are the flags of a leader-elected agent process
// for member-1 of f, with plain-HTTP metrics on metricsAddr (the tests
// scrape it to find the leader) and 500 ms heartbeats.
func leaderElectedAgentArgs(t *testing.T, f *fleet, kubeconfig, syncAddr, metricsAddr string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--hub-address", syncAddr,
		"--cert-file", filepath.Join(f.certDir, pki.AgentCertFile("member-1")),
		"--key-file", filepath.Join(f.certDir, pki.AgentKeyFile("member-1")),
		"--ca-file", filepath.Join(f.certDir, pki.CACertFile),
		"--leader-elect=true",
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address", freeAddr(t),
		"--heartbeat-interval", "500ms",
	}
}

// shortLease are Lease timings (3 s / 2 s / 0.5 s) that make a taken
// Lease lost within seconds.
var shortLease = []string{"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}

// leading is a poll step that passes once the process serving
// plain-HTTP metrics at addr says it leads.
func leading(addr string) func() error {
	return func() error {
		if !isLeader(scrape(addr)) {
			return fmt.Errorf("not leading yet")
		}
		return nil
	}
}
