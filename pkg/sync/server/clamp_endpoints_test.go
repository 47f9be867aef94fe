package server

import (
	"encoding/json"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

var (
	epDeployID = v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "api"}
	epSvcID    = v1alpha1.ResourceIdentifier{Version: "v1", Kind: "Service", Namespace: "shop", Name: "api"}
)

// endpointsWork is a Work of generation 3 with a Deployment of 3 replicas
// (default strategy: 25% of 3, rounded up, is 1 surge, so the bound is 4)
// and a Service.
func endpointsWork(t testing.TB) *v1alpha1.Work {
	t.Helper()
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "shop"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "api"}},
	}
	w := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop-api", Namespace: "flotilla-cluster-east", Generation: 3}}
	for _, o := range []any{d, svc} {
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		w.Spec.Manifests = append(w.Spec.Manifests, v1alpha1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	return w
}

// endpointsReport is an honest report for endpointsWork: the Deployment's
// numbers and the Service's endpoints, all within bounds.
func endpointsReport() *v1alpha1.WorkStatus {
	conds := func() []metav1.Condition {
		return []metav1.Condition{cond(v1alpha1.ConditionApplied, v1alpha1.ReasonApplied)}
	}
	return &v1alpha1.WorkStatus{
		ObservedGeneration: 3,
		Conditions:         conds(),
		Manifests: []v1alpha1.ManifestStatus{
			{ResourceIdentifier: epDeployID, Conditions: conds(), Workload: &v1alpha1.WorkloadStatus{
				ObservedGeneration: 2, Generation: 2, Replicas: 4, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 1, UnavailableReplicas: 1,
			}},
			{ResourceIdentifier: epSvcID, Conditions: conds(), Endpoints: &v1alpha1.EndpointsStatus{Ready: 3, NotReady: 1}},
		},
	}
}

func TestEndpointsWorkBounds(t *testing.T) {
	bounds := workBounds(endpointsWork(t))
	if b := bounds[epDeployID]; !b.deployment || b.service || b.maxReplicas != 4 {
		t.Errorf("Deployment bound %+v, want a Deployment of at most 4 replicas", b)
	}
	if b, ok := bounds[epSvcID]; !ok || !b.service || b.deployment {
		t.Errorf("Service bound %+v (present %v), want a Service", b, ok)
	}
	if got := podBound(bounds); got != 4 {
		t.Errorf("podBound %d, want 4", got)
	}
}

func TestClampStatusEndpoints(t *testing.T) {
	work := endpointsWork(t)
	tests := []struct {
		name   string
		mutate func(st *v1alpha1.WorkStatus)
		want   func(st *v1alpha1.WorkStatus)
		cut    clamped
	}{
		{
			name: "endpoints within bounds are kept as they are",
			want: func(*v1alpha1.WorkStatus) {},
			cut:  clamped{},
		},
		{
			name: "endpoints at the bounds (4 ready, 8 not ready) are kept",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 4, NotReady: 8}
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 4, NotReady: 8}
			},
			cut: clamped{},
		},
		{
			name:   "zero endpoints are kept",
			mutate: func(st *v1alpha1.WorkStatus) { st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{} },
			want:   func(st *v1alpha1.WorkStatus) { st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{} },
			cut:    clamped{},
		},
		{
			name:   "no endpoints reported: none kept",
			mutate: func(st *v1alpha1.WorkStatus) { st.Manifests[1].Endpoints = nil },
			want:   func(st *v1alpha1.WorkStatus) { st.Manifests[1].Endpoints = nil },
			cut:    clamped{},
		},
		{
			name: "100 ready becomes 4, 100 not ready becomes 8",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 100, NotReady: 100}
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 4, NotReady: 8}
			},
			cut: clamped{clampCountAboveBound: 2},
		},
		{
			name: "one above the bound is cut",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 5, NotReady: 9}
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 4, NotReady: 8}
			},
			cut: clamped{clampCountAboveBound: 2},
		},
		{
			name: "MaxInt32 does not overflow the not-ready bound",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 2147483647, NotReady: 2147483647}
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 4, NotReady: 8}
			},
			cut: clamped{clampCountAboveBound: 2},
		},
		{
			name: "negative counts become 0",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: -1, NotReady: -2147483648}
			},
			want: func(st *v1alpha1.WorkStatus) { st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{} },
			cut:  clamped{clampCountNegative: 2},
		},
		{
			name: "one negative, one above: each counted",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: -3, NotReady: 50}
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 0, NotReady: 8}
			},
			cut: clamped{clampCountNegative: 1, clampCountAboveBound: 1},
		},
		{
			name: "endpoints on the Deployment are dropped",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[0].Endpoints = &v1alpha1.EndpointsStatus{Ready: 2, NotReady: 1}
			},
			want: func(*v1alpha1.WorkStatus) {},
			cut:  clamped{clampEndpoints: 1},
		},
		{
			name: "endpoints on the Deployment are dropped, even out of bounds, without counting their numbers",
			mutate: func(st *v1alpha1.WorkStatus) {
				st.Manifests[0].Endpoints = &v1alpha1.EndpointsStatus{Ready: -1, NotReady: 1000}
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 1000, NotReady: 0}
			},
			want: func(st *v1alpha1.WorkStatus) {
				st.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 4, NotReady: 0}
			},
			cut: clamped{clampEndpoints: 1, clampCountAboveBound: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := endpointsReport()
			if tt.mutate != nil {
				tt.mutate(in)
			}
			before := in.DeepCopy()
			got, cut := clampStatus(work, in)
			if !equality.Semantic.DeepEqual(in, before) {
				t.Errorf("clampStatus changed its input")
			}
			if fmt.Sprint(cut) != fmt.Sprint(tt.cut) {
				t.Errorf("cut %v, want %v", cut, tt.cut)
			}
			if got == nil {
				t.Fatal("the whole report was dropped")
			}
			want := endpointsReport()
			tt.want(want)
			if !equality.Semantic.DeepEqual(got, want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				t.Errorf("got\n%s\nwant\n%s", gj, wj)
			}
			if got.Manifests[1].Endpoints != nil && got.Manifests[1].Endpoints == in.Manifests[1].Endpoints {
				t.Errorf("the kept endpoints share the input's pointer")
			}
			// Clamping again is stable: nothing more is cut.
			again, cut2 := clampStatus(work, got)
			if len(cut2) > 0 || !equality.Semantic.DeepEqual(again, got) {
				t.Errorf("clamping again cut %v", cut2)
			}
		})
	}
}

// TestClampStatusEndpointsOnConfigMap: endpoints reported on any manifest
// that is no Service (here clampWork's ConfigMap) are dropped and counted.
func TestClampStatusEndpointsOnConfigMap(t *testing.T) {
	work := clampWork(t, appsv1.DeploymentStrategy{})
	in := honest()
	in.Manifests[1].Endpoints = &v1alpha1.EndpointsStatus{Ready: 1}
	got, cut := clampStatus(work, in)
	if fmt.Sprint(cut) != fmt.Sprint(clamped{clampEndpoints: 1}) {
		t.Errorf("cut %v, want %v", cut, clamped{clampEndpoints: 1})
	}
	if got == nil {
		t.Fatal("the whole report was dropped")
	}
	for _, m := range got.Manifests {
		if m.Endpoints != nil {
			t.Errorf("endpoints kept on %+v: %+v", m.ResourceIdentifier, *m.Endpoints)
		}
	}
}

// TestClampStatusEndpointsWithoutDeployment: a Work with a Service and no
// Deployment runs no pods the hub knows of, so the bound is 0.
func TestClampStatusEndpointsWithoutDeployment(t *testing.T) {
	work := endpointsWork(t)
	work.Spec.Manifests = work.Spec.Manifests[1:]
	in := &v1alpha1.WorkStatus{
		ObservedGeneration: 3,
		Manifests: []v1alpha1.ManifestStatus{
			{ResourceIdentifier: epSvcID, Endpoints: &v1alpha1.EndpointsStatus{Ready: 2, NotReady: 1}},
		},
	}
	got, cut := clampStatus(work, in)
	if fmt.Sprint(cut) != fmt.Sprint(clamped{clampCountAboveBound: 2}) {
		t.Errorf("cut %v, want %v", cut, clamped{clampCountAboveBound: 2})
	}
	if got == nil || len(got.Manifests) != 1 || got.Manifests[0].Endpoints == nil {
		t.Fatalf("got %+v, want the Service with zero endpoints", got)
	}
	if e := *got.Manifests[0].Endpoints; e != (v1alpha1.EndpointsStatus{}) {
		t.Errorf("endpoints %+v, want {0 0}", e)
	}
}

// TestClampStatusEndpointsTwoDeployments: the bound is the sum of the
// Work's Deployments' bounds (3+1 and 10+3).
func TestClampStatusEndpointsTwoDeployments(t *testing.T) {
	work := endpointsWork(t)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: "shop"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](10)},
	}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	work.Spec.Manifests = append(work.Spec.Manifests, v1alpha1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	in := &v1alpha1.WorkStatus{
		ObservedGeneration: 3,
		Manifests: []v1alpha1.ManifestStatus{
			{ResourceIdentifier: epSvcID, Endpoints: &v1alpha1.EndpointsStatus{Ready: 100, NotReady: 100}},
		},
	}
	got, _ := clampStatus(work, in)
	if got == nil || len(got.Manifests) != 1 || got.Manifests[0].Endpoints == nil {
		t.Fatalf("got %+v, want the Service's endpoints", got)
	}
	if e := *got.Manifests[0].Endpoints; e != (v1alpha1.EndpointsStatus{Ready: 17, NotReady: 34}) {
		t.Errorf("endpoints %+v, want {17 34}", e)
	}
}
