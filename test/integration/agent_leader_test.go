package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

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
			"--kubeconfig", kubeconfig,
			"--hub-address", syncAddr,
			"--cert-file", filepath.Join(f.certDir, pki.AgentCertFile("member-1")),
			"--key-file", filepath.Join(f.certDir, pki.AgentKeyFile("member-1")),
			"--ca-file", filepath.Join(f.certDir, pki.CACertFile),
			"--leader-elect=true",
			// Plain HTTP: the test scrapes it to find the leader.
			"--metrics-bind-address", r.metrics, "--metrics-secure=false",
			"--health-probe-bind-address", freeAddr(t),
			"--heartbeat-interval", "500ms",
		)
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
