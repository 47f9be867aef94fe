package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
)

var (
	webID = v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "web"}
	cfgID = v1alpha1.ResourceIdentifier{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "cfg"}
	stamp = metav1.NewTime(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC))
)

// clampWork is a Work of generation 3 with a Deployment of 4 replicas
// (default strategy: maxSurge 25% of 4, rounded up, is 1, so the bound is
// 5) and a ConfigMap.
func clampWork(t testing.TB, strategy appsv1.DeploymentStrategy) *v1alpha1.Work {
	t.Helper()
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](4), Strategy: strategy},
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "shop"},
	}
	w := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop-web", Namespace: "flotilla-cluster-east", Generation: 3}}
	for _, o := range []any{d, cm} {
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		w.Spec.Manifests = append(w.Spec.Manifests, v1alpha1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	return w
}

func cond(typ, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "ok", ObservedGeneration: 3, LastTransitionTime: stamp}
}

// honest is what pkg/apply reports for clampWork: nothing of it is cut.
func honest() *v1alpha1.WorkStatus {
	// Each list its own, so that a case changes one of them only.
	conds := func() []metav1.Condition {
		return []metav1.Condition{
			cond(v1alpha1.ConditionApplied, v1alpha1.ReasonApplied),
			cond(v1alpha1.ConditionAvailable, v1alpha1.ReasonAvailable),
			cond(v1alpha1.ConditionProgressing, v1alpha1.ReasonComplete),
			cond(v1alpha1.ConditionDegraded, "ImagePullBackOff"),
		}
	}
	return &v1alpha1.WorkStatus{
		ObservedGeneration: 3,
		Conditions:         conds(),
		Manifests: []v1alpha1.ManifestStatus{
			{ResourceIdentifier: webID, Conditions: conds(), Workload: &v1alpha1.WorkloadStatus{
				ObservedGeneration: 7, Generation: 7, Replicas: 5, ReadyReplicas: 4, AvailableReplicas: 4, UpdatedReplicas: 2, UnavailableReplicas: 1,
			}},
			{ResourceIdentifier: cfgID, Conditions: conds()},
		},
	}
}

func TestClampStatus(t *testing.T) {
	work := clampWork(t, appsv1.DeploymentStrategy{})
	tests := []struct {
		name   string
		work   *v1alpha1.Work // nil: clampWork with the default strategy
		noWork bool           // the hub has no such Work
		mutate func(st *v1alpha1.WorkStatus)
		want   func(st *v1alpha1.WorkStatus) // nil: the whole report is dropped
		cut    clamped
	}{
		{
			name: "an honest report passes whole, surge included",
			want: func(*v1alpha1.WorkStatus) {},
			cut:  clamped{},
		},
		{
			name:   "unknown Work",
			noWork: true,
			cut:    clamped{clampWorkUnknown: 1},
		},
		{
			name:   "observedGeneration ahead of the Work: about some other Work",
			mutate: func(st *v1alpha1.WorkStatus) { st.ObservedGeneration = 4 },
			cut:    clamped{clampGenerationAhead: 1},
		},
		{
			name: "negative counts become 0",
			mutate: func(st *v1alpha1.WorkStatus) {
				wl := st.Manifests[0].Workload
				wl.Replicas, wl.ReadyReplicas, wl.ObservedGeneration = -1, -5, -2
			},
			want: func(st *v1alpha1.WorkStatus) {
				wl := st.Manifests[0].Workload
				wl.Replicas, wl.ReadyReplicas, wl.ObservedGeneration = 0, 0, 0
			},
			cut: clamped{clampCountNegative: 3},
		},
		{
			name: "counts above replicas + maxSurge become the bound",
			mutate: func(st *v1alpha1.WorkStatus) {
				wl := st.Manifests[0].Workload
				wl.Replicas, wl.AvailableReplicas, wl.UpdatedReplicas = 1_000_000, 6, 2147483647
			},
			want: func(st *v1alpha1.WorkStatus) {
				wl := st.Manifests[0].Workload
				wl.Replicas, wl.AvailableReplicas, wl.UpdatedReplicas = 5, 5, 5
			},
			cut: clamped{clampCountAboveBound: 3},
		},
		{
			name: "a Recreate Deployment has no surge",
			work: clampWork(t, appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}),
			want: func(st *v1alpha1.WorkStatus) { st.Manifests[0].Workload.Replicas = 4 },
			cut:  clamped{clampCountAboveBound: 1},
		},
		{
			name: "an absolute maxSurge of 10 allows 14",
			work: clampWork(t, appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(10))}}),
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[0].Workload.Replicas = 14
				st.Manifests[0].Workload.ReadyReplicas = 15
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[0].Workload.Replicas = 14
				st.Manifests[0].Workload.ReadyReplicas = 14
			},
			cut: clamped{clampCountAboveBound: 1},
		},
		{
			name:   "numbers on a manifest that is no Deployment are dropped",
			mutate: func(st *v1alpha1.WorkStatus) { st.Manifests[1].Workload = &v1alpha1.WorkloadStatus{Replicas: 3} },
			want:   func(*v1alpha1.WorkStatus) {},
			cut:    clamped{clampWorkload: 1},
		},
		{
			name: "condition types the agent does not own are dropped",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Conditions = append(st.Conditions, cond(v1alpha1.ConditionScheduled, v1alpha1.ReasonApplied), cond("Ready", "Ready"))
			},
			want: func(*v1alpha1.WorkStatus) {},
			cut:  clamped{clampConditionType: 2},
		},
		{
			name: "hub-owned reasons are dropped, on the Work and on manifests",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Conditions[3].Reason = v1alpha1.ReasonUnschedulable
				st.Manifests[0].Conditions[1].Reason = v1alpha1.ReasonClusterLost
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Conditions = st.Conditions[:3]
				st.Manifests[0].Conditions = []metav1.Condition{st.Manifests[0].Conditions[0], st.Manifests[0].Conditions[2], st.Manifests[0].Conditions[3]}
			},
			cut: clamped{clampConditionReason: 2},
		},
		{
			name: "10,000 conditions: one per agent type is kept",
			mutate: func(st *v1alpha1.WorkStatus) {
				for i := range 10_000 {
					st.Conditions = append(st.Conditions, cond(fmt.Sprintf("T%d", i), "Flood"))
				}
				st.Conditions = append(st.Conditions, cond(v1alpha1.ConditionApplied, "Again"))
			},
			want: func(*v1alpha1.WorkStatus) {},
			cut:  clamped{clampConditionType: 10_000, clampConditionInvalid: 1},
		},
		{
			name: "invalid status, reason or missing lastTransitionTime: the condition is dropped",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Conditions[0].Status = "Maybe"
				st.Conditions[1].Reason = "has spaces"
				st.Conditions[2].Reason = strings.Repeat("A", MaxStatusReasonLength+1)
				st.Conditions[3].LastTransitionTime = metav1.Time{}
			},
			want: func(st *v1alpha1.WorkStatus) { st.Conditions = nil },
			cut:  clamped{clampConditionInvalid: 4},
		},
		{
			name:   "a long message is cut",
			mutate: func(st *v1alpha1.WorkStatus) { st.Conditions[0].Message = strings.Repeat("x", 1<<20) },
			want: func(st *v1alpha1.WorkStatus) {
				st.Conditions[0].Message = truncate.String(strings.Repeat("x", 1<<20), MaxStatusMessageLength)
			},
			cut: clamped{clampMessage: 1},
		},
		{
			name:   "a condition's observedGeneration is clamped into [0, generation]",
			mutate: func(st *v1alpha1.WorkStatus) { st.Conditions[0].ObservedGeneration = 99 },
			want:   func(st *v1alpha1.WorkStatus) { st.Conditions[0].ObservedGeneration = 3 },
			cut:    clamped{clampCountAboveBound: 1},
		},
		{
			name: "manifests not in the Work, and repeats, are dropped",
			mutate: func(st *v1alpha1.WorkStatus) {
				other := webID
				other.Namespace = "kube-system"
				st.Manifests = append(st.Manifests, v1alpha1.ManifestStatus{ResourceIdentifier: other}, st.Manifests[1])
				for i := range 1000 {
					st.Manifests = append(st.Manifests, v1alpha1.ManifestStatus{ResourceIdentifier: v1alpha1.ResourceIdentifier{Kind: "Secret", Name: fmt.Sprint(i)}})
				}
			},
			want: func(*v1alpha1.WorkStatus) {},
			cut:  clamped{clampManifestUnknown: 1001, clampManifestDuplicate: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := work
			switch {
			case tt.noWork:
				w = nil
			case tt.work != nil:
				w = tt.work
			}
			in := honest()
			if tt.mutate != nil {
				tt.mutate(in)
			}
			before := in.DeepCopy()
			got, cut := clampStatus(w, in)
			if !equality.Semantic.DeepEqual(in, before) {
				t.Errorf("clampStatus changed its input")
			}
			if fmt.Sprint(cut) != fmt.Sprint(tt.cut) {
				t.Errorf("cut %v, want %v", cut, tt.cut)
			}
			if tt.want == nil {
				if got != nil {
					t.Fatalf("got %+v, want the report dropped", got)
				}
				return
			}
			want := honest()
			tt.want(want)
			if !equality.Semantic.DeepEqual(got, want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				t.Errorf("got\n%s\nwant\n%s", gj, wj)
			}
		})
	}
}

func TestDeploymentBound(t *testing.T) {
	tests := []struct {
		name     string
		replicas *int32
		strategy appsv1.DeploymentStrategy
		want     int32
	}{
		{"unset replicas default to 1, 25% surge rounds up to 1", nil, appsv1.DeploymentStrategy{}, 2},
		{"zero replicas", ptr.To[int32](0), appsv1.DeploymentStrategy{}, 0},
		{"10 replicas, 25% is 2.5, rounded up to 3", ptr.To[int32](10), appsv1.DeploymentStrategy{}, 13},
		{"percent surge", ptr.To[int32](10), appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("100%"))}}, 20},
		{"Recreate", ptr.To[int32](10), appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}, 10},
		{"a huge surge stops at MaxInt32", ptr.To[int32](2147483647), appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(2147483647))}}, 2147483647},
		{"an unparsable surge counts as none", ptr.To[int32](3), appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("lots"))}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deploymentBound(&appsv1.DeploymentSpec{Replicas: tt.replicas, Strategy: tt.strategy}); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// FuzzClampStatus checks clampStatus's promises on any report that
// decodes: what it keeps is within every bound, it is stable (clamping
// again cuts nothing) and it never changes its input.
func FuzzClampStatus(f *testing.F) {
	seed := func(st *v1alpha1.WorkStatus) {
		data, err := json.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	seed(honest())
	bad := honest()
	bad.Manifests[0].Workload.Replicas = -3
	bad.Manifests[0].Workload.ReadyReplicas = 99
	bad.Conditions = append(bad.Conditions, cond("Scheduled", "Unschedulable"), cond("Applied", "Again"))
	seed(bad)
	f.Add([]byte(`{"observedGeneration":2,"conditions":[{"type":"Degraded","status":"True","reason":"Failed","message":"","lastTransitionTime":"2026-12-01T19:00:00Z","observedGeneration":-4}]}`))
	work := clampWork(f, appsv1.DeploymentStrategy{})
	bounds := workBounds(work)
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := wire.DecodeWorkStatus(data)
		if err != nil {
			return
		}
		before := st.DeepCopy()
		got, _ := clampStatus(work, st)
		if !equality.Semantic.DeepEqual(st, before) {
			t.Fatal("clampStatus changed its input")
		}
		if got == nil {
			return
		}
		if got.ObservedGeneration < 0 || got.ObservedGeneration > work.Generation {
			t.Fatalf("observedGeneration %d kept", got.ObservedGeneration)
		}
		checkConds := func(where string, cs []metav1.Condition) {
			if len(cs) > MaxStatusConditions {
				t.Fatalf("%s: %d conditions kept", where, len(cs))
			}
			seen := map[string]bool{}
			for _, c := range cs {
				if !agentConditionTypes.Has(c.Type) || seen[c.Type] || hubReasons.Has(c.Reason) ||
					len(c.Message) > MaxStatusMessageLength || !reasonPattern.MatchString(c.Reason) ||
					c.ObservedGeneration < 0 || c.ObservedGeneration > work.Generation {
					t.Fatalf("%s: condition %+v kept", where, c)
				}
				seen[c.Type] = true
			}
		}
		checkConds("work", got.Conditions)
		if len(got.Manifests) > len(work.Spec.Manifests) {
			t.Fatalf("%d manifests kept for a Work of %d", len(got.Manifests), len(work.Spec.Manifests))
		}
		for _, m := range got.Manifests {
			b, ok := bounds[m.ResourceIdentifier]
			if !ok {
				t.Fatalf("manifest %+v is not the Work's", m.ResourceIdentifier)
			}
			checkConds(fmt.Sprint(m.ResourceIdentifier), m.Conditions)
			if wl := m.Workload; wl != nil {
				if !b.deployment {
					t.Fatalf("workload kept on %+v", m.ResourceIdentifier)
				}
				for _, n := range []int32{wl.Replicas, wl.ReadyReplicas, wl.AvailableReplicas, wl.UpdatedReplicas, wl.UnavailableReplicas} {
					if n < 0 || n > b.maxReplicas {
						t.Fatalf("count %d kept, bound %d", n, b.maxReplicas)
					}
				}
			}
		}
		again, cut := clampStatus(work, got)
		if len(cut) > 0 || !equality.Semantic.DeepEqual(again, got) {
			t.Fatalf("clamping again cut %v", cut)
		}
	})
}
