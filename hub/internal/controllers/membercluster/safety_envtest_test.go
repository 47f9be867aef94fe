package membercluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

func gaugeValue(g prometheus.Gauge) float64 {
	m := &dto.Metric{}
	if err := g.Write(m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

// confirmer records the confirmations the controller sends.
type confirmer struct {
	mu     sync.Mutex
	epochs []uint64
}

func (c *confirmer) ConfirmPrune(_ string, epoch uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochs = append(c.epochs, epoch)
	return true
}

func (c *confirmer) sent() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.epochs)
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 30s: %s", what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRefusalAndHeldPruneOnTheMemberCluster runs the controller against a
// real apiserver and feeds its Tracker what the sync server would: a held
// prune shows as PruneBlocked with the command to confirm, the annotation
// for that epoch sends the confirmation once, the agent's prune clears
// the condition; an agent refusing the hub shows as FleetMismatch.
func TestRefusalAndHeldPruneOnTheMemberCluster(t *testing.T) {
	cfg := startEnv(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, envtestenv.ManagerOptions(scheme))
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(time.Second)
	conf := &confirmer{}
	if err := (&Reconciler{Client: mgr.GetClient(), Tracker: tr, Recorder: mgr.GetEventRecorder("test"), Prunes: conf, Grace: time.Hour}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const name = "safety-m1"
	mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	condition := func(typ string) *metav1.Condition {
		got := &flotillav1.MemberCluster{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, typ)
	}
	annotate := func(v string) {
		t.Helper()
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, flotillav1.AnnotationConfirmPrune, v))
		if err := c.Patch(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	hasEvent := func(reason string) (bool, string) {
		var list eventsv1.EventList
		if err := c.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		var reasons []string
		for _, e := range list.Items {
			if e.Regarding.Name == name {
				reasons = append(reasons, e.Reason)
			}
		}
		return slices.Contains(reasons, reason), fmt.Sprintf("events %q", reasons)
	}

	tr.AgentConnected(name, syncserver.AgentInfo{Instance: "agent-0", ConnectedAt: time.Now()})
	tr.AgentPruneBlocked(name, syncserver.PruneBlocked{Epoch: 77, WouldDelete: 3, Held: 4, Works: []string{"b", "c", "d"}})
	eventually(t, "PruneBlocked True", func() (bool, string) {
		p := condition(flotillav1.ConditionPruneBlocked)
		return p != nil && p.Status == metav1.ConditionTrue && strings.Contains(p.Message, "confirm-prune=77"), fmt.Sprintf("%+v", p)
	})
	// The gauge is set just after the status write the poll above saw.
	eventually(t, "flotilla_prune_blocked 1", func() (bool, string) {
		v := gaugeValue(pruneBlocked.WithLabelValues(name))
		return v == 1, fmt.Sprintf("flotilla_prune_blocked = %v", v)
	})
	eventually(t, "a PruneBlocked event", func() (bool, string) { return hasEvent(flotillav1.ConditionPruneBlocked) })

	// A confirmation for another epoch is not passed on.
	annotate("76")
	annotate("77")
	eventually(t, "the confirmation sent", func() (bool, string) {
		s := conf.sent()
		return slices.Equal(s, []uint64{77}), fmt.Sprintf("sent %v", s)
	})
	tr.AgentPruned(name, 77, true)
	eventually(t, "PruneBlocked False", func() (bool, string) {
		p := condition(flotillav1.ConditionPruneBlocked)
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == flotillav1.ReasonPruned, fmt.Sprintf("%+v", p)
	})
	// The gauge is set just after the status write the poll above saw.
	eventually(t, "flotilla_prune_blocked 0", func() (bool, string) {
		v := gaugeValue(pruneBlocked.WithLabelValues(name))
		return v == 0, fmt.Sprintf("flotilla_prune_blocked = %v", v)
	})
	if s := conf.sent(); len(s) != 1 {
		t.Errorf("confirmations sent %v, want one", s)
	}

	// The agent goes; another one with this cluster's certificate refuses
	// the hub.
	tr.AgentDisconnected(name, errors.New("stream closed"))
	tr.AgentRefused(name, syncserver.Refusal{Reason: "this agent serves fleet a, not the hub's fleet b", Peer: "10.0.0.9:4000"})
	eventually(t, "Connected False, FleetMismatch", func() (bool, string) {
		p := condition(flotillav1.ConditionConnected)
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == flotillav1.ReasonFleetMismatch && strings.Contains(p.Message, "serves fleet a"), fmt.Sprintf("%+v", p)
	})
	eventually(t, "a FleetMismatch event", func() (bool, string) { return hasEvent(flotillav1.ReasonFleetMismatch) })
	eventually(t, "flotilla_member_fleet_mismatch 1", func() (bool, string) {
		v := gaugeValue(fleetMismatch.WithLabelValues(name))
		return v == 1, fmt.Sprintf("flotilla_member_fleet_mismatch = %v", v)
	})
}
