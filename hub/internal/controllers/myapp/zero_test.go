package myapp

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// hub is a small stand-in for the hub's apiserver and the members around
// the pure steps of the controller: it runs desired on what it holds,
// stores the Works the plan writes (a Work keeps its UID across updates,
// as in the apiserver) and the status, and lets members report.
type hub struct {
	t        *testing.T
	app      *flotillav1.MyApp
	clusters clusterSet
	works    map[string]*flotillav1.Work
	uids     int
	now      time.Time
	last     *desiredState
	// policies are the FleetNamespacePolicies the reconciles see.
	policies []flotillav1.FleetNamespacePolicy
}

func newHub(t *testing.T, a *flotillav1.MyApp, names ...string) *hub {
	return &hub{t: t, app: a, clusters: members(names...), works: map[string]*flotillav1.Work{}, now: t0}
}

// reconcile runs one reconcile's read-desired-write on the hub's state.
func (h *hub) reconcile() *desiredState {
	h.t.Helper()
	d, err := desired(&scope{app: h.app, clusters: h.clusters, works: h.works, policies: h.policies, now: h.now, revisionKey: testRevisionKey})
	if err != nil {
		h.t.Fatalf("desired: %v", err)
	}
	for _, w := range d.works.apply {
		cluster := w.Labels[flotillav1.LabelCluster]
		w = w.DeepCopy()
		if old := h.works[cluster]; old != nil {
			w.UID, w.Generation, w.Status = old.UID, old.Generation+1, old.Status
		} else {
			h.uids++
			w.UID, w.Generation = types.UID(fmt.Sprintf("uid-%d", h.uids)), 1
		}
		h.works[cluster] = w
	}
	for _, w := range d.works.remove {
		delete(h.works, w.Labels[flotillav1.LabelCluster])
	}
	h.app.Status = d.status
	h.last = d
	return d
}

// report makes every reachable member report its Work applied, with the
// Deployment's replicas all ready.
func (h *hub) report() {
	for name, w := range h.works {
		if mc := h.clusters.byName[name]; mc == nil || !meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady) {
			continue
		}
		n := deploymentReplicas(h.t, w)
		w.Status = healthyWork(n).Status
		w.Status.ObservedGeneration = w.Generation
	}
}

// settle reconciles and reports until nothing is written.
func (h *hub) settle() {
	h.t.Helper()
	for range 5 {
		d := h.reconcile()
		if len(d.works.apply) == 0 && len(d.works.remove) == 0 {
			h.reconcile()
			return
		}
		h.report()
	}
	h.t.Fatal("the hub did not settle in 5 reconciles")
}

func (h *hub) uidsByCluster() map[string]types.UID {
	out := map[string]types.UID{}
	for n, w := range h.works {
		out[n] = w.UID
	}
	return out
}

func deploymentReplicas(t *testing.T, w *flotillav1.Work) int32 {
	t.Helper()
	var d appsv1.Deployment
	if err := json.Unmarshal(w.Spec.Manifests[0].Raw, &d); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(d.Spec.Replicas, 1)
}

// replicasByCluster is each Work's Deployment replicas, "a=2 b=2".
func (h *hub) replicasByCluster() string {
	out := ""
	for _, n := range slices.Sorted(maps.Keys(h.works)) {
		if out != "" {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", n, deploymentReplicas(h.t, h.works[n]))
	}
	return out
}

func (h *hub) wantReady(reason, message string) {
	h.t.Helper()
	c := meta.FindStatusCondition(h.app.Status.Conditions, flotillav1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || (message != "" && c.Message != message) {
		h.t.Fatalf("Ready = %+v, want True %s %q; conditions %+v", c, reason, message, h.app.Status.Conditions)
	}
	for _, typ := range []string{flotillav1.ConditionApplied, flotillav1.ConditionAvailable} {
		if !meta.IsStatusConditionTrue(h.app.Status.Conditions, typ) {
			h.t.Errorf("%s not True: %+v", typ, meta.FindStatusCondition(h.app.Status.Conditions, typ))
		}
	}
	if meta.IsStatusConditionTrue(h.app.Status.Conditions, flotillav1.ConditionDegraded) {
		h.t.Errorf("Degraded: %+v", meta.FindStatusCondition(h.app.Status.Conditions, flotillav1.ConditionDegraded))
	}
}

func scale(h *hub, n int32) {
	h.app.Spec.Replicas = ptr.To(n)
	h.app.Generation++
}

func staticOneOneOne(a *flotillav1.MyApp) {
	a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided, ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
		WeightPreference: &flotillav1.ClusterPreferences{StaticWeightList: []flotillav1.StaticClusterWeight{
			{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"a"}}, Weight: 1},
			{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"b"}}, Weight: 1},
			{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"c"}}, Weight: 1},
		}},
	}
}

// TestScaleToZeroKeepsWorks: 6 -> 0 -> 6 keeps the same Works (same UIDs,
// so the members keep the same Deployments) at 0 replicas in between, and
// the app is Ready all the way through once the members confirm.
func TestScaleToZeroKeepsWorks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opt       func(*flotillav1.MyApp)
		at6, at0  string
		wantReady string
	}{
		{"Divided static 1:1:1", staticOneOneOne, "a=2 b=2 c=2", "a=0 b=0 c=0", "6/6 replicas ready in 3 clusters"},
		{"Duplicated", func(*flotillav1.MyApp) {}, "a=6 b=6 c=6", "a=0 b=0 c=0", "18/18 replicas ready in 3 clusters"},
		{"dynamic weights", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided,
				ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted, WeightPreference: &flotillav1.ClusterPreferences{DynamicWeight: flotillav1.DynamicWeightAvailableReplicas}}
		}, "a=2 b=2 c=2", "a=0 b=0 c=0", "6/6 replicas ready in 3 clusters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t, app(tc.opt, func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](6) }), "a", "b", "c")
			h.settle()
			if got := h.replicasByCluster(); got != tc.at6 {
				t.Fatalf("at 6: %s, want %s", got, tc.at6)
			}
			h.wantReady(flotillav1.ReasonReady, tc.wantReady)
			before := h.uidsByCluster()

			scale(h, 0)
			d := h.reconcile()
			if len(d.works.remove) > 0 {
				t.Fatalf("scaling to zero removes Works of %v", clusterNames(d.works.remove))
			}
			for _, c := range d.decision.Clusters {
				if c.Replicas != 0 || c.Reason != flotillav1.TargetReasonKeptAtZero {
					t.Errorf("decision at 0: %+v, want 0 replicas, reason KeptAtZero", c)
				}
			}
			if c := meta.FindStatusCondition(h.app.Status.Conditions, flotillav1.ConditionReady); c.Status == metav1.ConditionTrue {
				t.Errorf("Ready before the members confirmed 0: %+v", c)
			}
			h.report()
			h.settle()
			if got := h.replicasByCluster(); got != tc.at0 {
				t.Fatalf("at 0: %s, want %s", got, tc.at0)
			}
			h.wantReady(flotillav1.ReasonScaledToZero, "0/0 replicas")
			if h.app.Status.DesiredReplicas != 0 || h.app.Status.ClusterCount != 3 {
				t.Errorf("status desired %d on %d clusters, want 0 on 3", h.app.Status.DesiredReplicas, h.app.Status.ClusterCount)
			}
			if got := h.uidsByCluster(); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("Works at 0: %v, want the same as before %v", got, before)
			}

			scale(h, 6)
			h.settle()
			if got := h.replicasByCluster(); got != tc.at6 {
				t.Fatalf("back at 6: %s, want %s", got, tc.at6)
			}
			h.wantReady(flotillav1.ReasonReady, tc.wantReady)
			if got := h.uidsByCluster(); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("Works back at 6: %v, want the same as before %v", got, before)
			}
		})
	}
}

// TestScaledToZeroFailoverMovesNothing: a member of an app at 0 lost past
// its toleration keeps its Work, nothing is evicted, the app stays Ready;
// when it returns nothing fails back and nothing is written.
func TestScaledToZeroFailoverMovesNothing(t *testing.T) {
	h := newHub(t, app(staticOneOneOne, func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](0) }), "a", "b", "c")
	h.app.Status.Placement = decision(map[string]int32{"a": 2, "b": 2, "c": 2}) // it ran 6 before
	h.settle()
	h.wantReady(flotillav1.ReasonScaledToZero, "0/0 replicas")
	before := h.uidsByCluster()

	lost := h.clusters.byName["b"]
	lost.Status.Conditions[0].Status, lost.Status.Conditions[0].Message = metav1.ConditionUnknown, "no heartbeat"
	lost.Spec.Taints = []corev1.Taint{{Key: flotillav1.TaintClusterUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.NewTime(t0))}}
	h.now = t0.Add(time.Minute) // past the 10 s toleration
	d := h.reconcile()
	if len(d.works.apply) > 0 || len(d.works.remove) > 0 {
		t.Errorf("losing a member at 0 writes %v and removes %v", clusterNames(d.works.apply), clusterNames(d.works.remove))
	}
	if len(d.decision.Evicted) > 0 || len(d.decision.Clusters) != 3 {
		t.Errorf("decision %+v, want the 3 clusters kept and nothing evicted", d.decision)
	}
	h.wantReady(flotillav1.ReasonScaledToZero, "0/0 replicas")

	lost.Spec.Taints = nil
	lost.Status.Conditions[0].Status = metav1.ConditionTrue
	lost.Status.Conditions[0].LastTransitionTime = metav1.NewTime(h.now)
	h.now = h.now.Add(time.Minute) // past the failback window
	d = h.reconcile()
	if len(d.works.apply) > 0 || len(d.works.remove) > 0 || len(d.decision.Evicted) > 0 {
		t.Errorf("the member's return writes %v, removes %v, evicted %v", clusterNames(d.works.apply), clusterNames(d.works.remove), d.decision.Evicted)
	}
	h.wantReady(flotillav1.ReasonScaledToZero, "0/0 replicas")
	if got := h.uidsByCluster(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("Works %v, want the same as before %v", got, before)
	}
}

// TestProgressiveImageChangeAtZero: a Progressive rollout of a new image
// at 0 replicas writes every cluster's Work with it in one reconcile and
// completes.
func TestProgressiveImageChangeAtZero(t *testing.T) {
	h := newHub(t, app(staticOneOneOne, func(a *flotillav1.MyApp) {
		a.Spec.Replicas = ptr.To[int32](6)
		a.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &flotillav1.ProgressiveRollout{
			MinSuccessTime: &metav1.Duration{Duration: time.Minute}}}
	}), "a", "b", "c")
	h.settle()
	scale(h, 0)
	h.settle()

	h.app.Spec.Image = "registry.example.com/team/web:2.0"
	h.app.Generation++
	d := h.reconcile()
	if got := clusterNames(d.works.apply); len(got) != 3 {
		t.Fatalf("the image change writes %v, want all 3 clusters at once", got)
	}
	if ro := h.app.Status.Rollout; ro.Phase != flotillav1.RolloutPhaseComplete || ro.CurrentRevision != ro.TargetRevision {
		t.Fatalf("rollout %s %s -> %s (%s), want Complete on the new revision", ro.Phase, ro.CurrentRevision, ro.TargetRevision, ro.Message)
	}
	for name, w := range h.works {
		var dep appsv1.Deployment
		if err := json.Unmarshal(w.Spec.Manifests[0].Raw, &dep); err != nil {
			t.Fatal(err)
		}
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != h.app.Spec.Image {
			t.Errorf("%s runs %s, want %s", name, img, h.app.Spec.Image)
		}
	}
	h.report()
	h.settle()
	h.wantReady(flotillav1.ReasonScaledToZero, "0/0 replicas")
	if c := meta.FindStatusCondition(h.app.Status.Conditions, flotillav1.ConditionProgressing); c.Status != metav1.ConditionFalse {
		t.Errorf("Progressing %+v, want False", c)
	}
}

// testRevisionKey signs the revision templates of the tests' rollouts.
var testRevisionKey = []byte("test revision key, 32 bytes long")
