package setup

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// testHub is a sync server on a fixed loopback address with in-memory
// Works, so a test can stop it and start another hub (another fleet) at
// the same address, as a hub restored from a backup would come back.
type testHub struct {
	mu       sync.Mutex
	works    map[string]*flotillav1.Work
	refusals int
	blocked  *syncserver.PruneBlocked
	pruned   int
	// statuses are the last Work statuses the agent reported, by Work.
	statuses map[string]*flotillav1.WorkStatus
	srv      *syncserver.Server
	done     chan error
}

func (h *testHub) HasSynced() bool { return true }
func (h *testHub) ListWorks(string) ([]*flotillav1.Work, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*flotillav1.Work, 0, len(h.works))
	for _, w := range h.works {
		out = append(out, w)
	}
	return out, nil
}
func (h *testHub) GetWork(_, name string) (*flotillav1.Work, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.works[name], nil
}

// DeletionIntent implements WorkSource: this hub sees no deletions (its
// Works only ever differ between hubs), so a Work it lacks is left to the
// snapshot's prune.
func (h *testHub) DeletionIntent(string, string) (string, bool) { return "", false }

func (h *testHub) ClusterKnown(context.Context, string) (bool, error) { return true, nil }
func (h *testHub) AgentConnected(string, syncserver.AgentInfo)        {}
func (h *testHub) AgentHeartbeat(string, syncserver.Heartbeat)        {}
func (h *testHub) AgentDisconnected(string, error)                    {}
func (h *testHub) WorkStatus(_ context.Context, _, work string, st *flotillav1.WorkStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.statuses == nil {
		h.statuses = map[string]*flotillav1.WorkStatus{}
	}
	h.statuses[work] = st.DeepCopy()
}

// status returns the last status the agent reported for Work work, or nil.
func (h *testHub) status(work string) *flotillav1.WorkStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statuses[work].DeepCopy()
}
func (h *testHub) AgentRefused(string, syncserver.Refusal) {
	h.mu.Lock()
	h.refusals++
	h.mu.Unlock()
}
func (h *testHub) AgentPruneBlocked(_ string, b syncserver.PruneBlocked) {
	h.mu.Lock()
	h.blocked = &b
	h.mu.Unlock()
}
func (h *testHub) AgentPruned(string, uint64, bool) {
	h.mu.Lock()
	h.blocked = nil
	h.pruned++
	h.mu.Unlock()
}

func (h *testHub) state() (refusals, pruned int, blocked *syncserver.PruneBlocked) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refusals, h.pruned, h.blocked
}

// startTestHub serves fleetID's Works for cluster east on addr.
func startTestHub(t *testing.T, certDir, addr, fleetID string, names []string) *testHub {
	t.Helper()
	h := &testHub{works: map[string]*flotillav1.Work{}, done: make(chan error, 1)}
	for i, n := range names {
		h.works[n] = e2eWork(n, fmt.Sprintf("%s-uid-%d", fleetID, i))
	}
	tlsCfg, err := pki.ServerTLSConfig(filepath.Join(certDir, pki.HubCertFile), filepath.Join(certDir, pki.HubKeyFile), filepath.Join(certDir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := syncserver.New(syncserver.Config{
		FleetID: fleetID, Works: h, Clusters: h, Status: h, Agents: h, TLS: tlsCfg,
		Registerer: prometheus.NewRegistry(), Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	go func() { h.done <- srv.Serve(lis) }()
	return h
}

func (h *testHub) stop() {
	h.srv.Stop()
	<-h.done
}

func e2eWork(name, uid string) *flotillav1.Work {
	deploy := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":"fleet-e2e"},`+
		`"spec":{"replicas":1,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q}},`+
		`"spec":{"containers":[{"name":"app","image":"registry.example/app:1.0"}]}}}}`, name, name, name)
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: flotillav1.ClusterNamespace("east"), UID: types.UID(uid), Generation: 1},
		Spec:       flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: k8sruntime.RawExtension{Raw: []byte(deploy)}}}},
	}
}

// TestAgentRefusesAnotherFleetThenBrakesThePrune runs the real agent
// (setup.New: sync client, Store, pkg/apply) against an envtest member and
// a sync server on loopback. A hub of another fleet that holds one of the
// eight Works is refused and deletes nothing; when the agent's own hub
// comes back holding one of them, its snapshot would delete seven of eight
// Deployments, which the brake holds until the hub confirms the prune.
func TestAgentRefusesAnotherFleetThenBrakesThePrune(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	certDir := t.TempDir()
	ca, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(certDir, ca, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureAgent(certDir, ca, "east"); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("app-%d", i))
	}
	hubA := startTestHub(t, certDir, addr, "fleet-a", names)

	var reg *prometheus.Registry
	startAgent := func() (*Agent, func()) {
		reg = prometheus.NewRegistry()
		a, err := New(Options{
			Config: cfg, HubAddress: addr, Namespace: "agent-e2e",
			CertFile: filepath.Join(certDir, pki.AgentCertFile("east")), KeyFile: filepath.Join(certDir, pki.AgentKeyFile("east")),
			CAFile: filepath.Join(certDir, pki.CACertFile), MetricsAddr: "0", ProbeAddr: "0",
			HeartbeatInterval: time.Second, ResourceInterval: time.Second, CreateNamespaces: true,
			Logger: testr.New(t), Registerer: reg,
		})
		if err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Start(mctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				<-done
			})
		}
		t.Cleanup(stop)
		return a, stop
	}
	a, stopAgent := startAgent()

	deployments := func() map[string]types.UID {
		var list appsv1.DeploymentList
		if err := c.List(ctx, &list, client.InNamespace("fleet-e2e")); err != nil {
			t.Fatal(err)
		}
		out := map[string]types.UID{}
		for _, d := range list.Items {
			if d.DeletionTimestamp.IsZero() {
				out[d.Name] = d.UID
			}
		}
		return out
	}
	waitFor := func(what string, cond func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			ok, why := cond()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen within 60s: %s", what, why)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("eight Deployments from fleet-a", func() (bool, string) {
		d := deployments()
		return len(d) == 8, fmt.Sprintf("%d Deployments", len(d))
	})
	before := deployments()

	// Another hub (another fleet) that holds one Work reaches the agent:
	// it is refused, and nothing is deleted.
	hubA.stop()
	hubB := startTestHub(t, certDir, addr, "fleet-b", names[:1])
	waitFor("two refusals", func() (bool, string) {
		r, _, _ := hubB.state()
		return r >= 2, fmt.Sprintf("%d refusals", r)
	})
	if d := deployments(); len(d) != 8 {
		t.Fatalf("the refusing agent left %d of 8 Deployments", len(d))
	}
	if st := a.Sync.State(); st.Refusal == "" {
		t.Errorf("agent state %+v, want a refusal", st)
	}

	// The agent restarts (it remembers what it applied only through its
	// records in the member), and the fleet's own hub comes back holding
	// one of the eight Works (a restore from an old backup of the same
	// hub, say): its snapshot would delete seven of eight, and the brake
	// holds it.
	stopAgent()
	a, _ = startAgent()
	hubB.stop()
	hubA = startTestHub(t, certDir, addr, "fleet-a", names[:1])
	t.Cleanup(hubA.stop)
	waitFor("the held prune reported", func() (bool, string) {
		_, _, b := hubA.state()
		return b != nil, "no PruneBlocked yet"
	})
	_, _, blocked := hubA.state()
	if blocked.WouldDelete != 7 || blocked.Held != 8 {
		t.Errorf("blocked = %+v, want 7 of 8", blocked)
	}
	if d := deployments(); len(d) != 8 {
		t.Fatalf("the brake let %d of 8 Deployments go", 8-len(d))
	}
	if st := a.Sync.State(); !st.PruneBlocked || st.Refusal != "" {
		t.Errorf("agent state %+v, want the prune blocked and no refusal", st)
	}
	prunes := func(result string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "flotilla_agent_prunes_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == result {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		t.Fatalf("no flotilla_agent_prunes_total{result=%q}", result)
		return 0
	}
	if b, ok := prunes(resultBlocked), prunes(resultSuccess); b < 1 || ok != 0 {
		t.Errorf("flotilla_agent_prunes_total: blocked %v, success %v; want the held prune counted blocked, none done", b, ok)
	}

	if !hubA.srv.ConfirmPrune("east", blocked.Epoch) {
		t.Fatal("the confirmation was not sent")
	}
	waitFor("the confirmed prune", func() (bool, string) {
		d := deployments()
		_, pruned, b := hubA.state()
		return len(d) == 1 && pruned >= 1 && b == nil, fmt.Sprintf("%d Deployments, pruned %d, blocked %v", len(d), pruned, b)
	})
	if d := deployments(); d["app-0"] != before["app-0"] {
		t.Errorf("app-0 was deleted or recreated (uid %q, was %q)", d["app-0"], before["app-0"])
	}
	if ok := prunes(resultSuccess); ok < 1 {
		t.Errorf("flotilla_agent_prunes_total{result=success} = %v after the confirmed prune, want at least 1", ok)
	}
}
