package appstatus

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// objectsWork is a healthy Work of one replica whose member also reported
// on the given manifests.
func objectsWork(ms ...flotillav1.ManifestStatus) *flotillav1.Work {
	w := healthyWork(1)
	w.Status.Manifests = append(w.Status.Manifests, ms...)
	return w
}

func core(kind, name string, conds ...metav1.Condition) flotillav1.ManifestStatus {
	return flotillav1.ManifestStatus{
		ResourceIdentifier: flotillav1.ResourceIdentifier{Version: "v1", Kind: kind, Namespace: "shop", Name: name},
		Conditions:         conds,
	}
}

func applied() metav1.Condition {
	return condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, "")
}

func TestClusterObjects(t *testing.T) {
	svc := core("Service", "web", applied())
	svc.Endpoints = &flotillav1.EndpointsStatus{Ready: 2, NotReady: 1}
	deploy := flotillav1.ManifestStatus{
		ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "extra"},
		Conditions:         []metav1.Condition{applied()},
	}
	work := objectsWork(
		svc,
		core("ConfigMap", "settings", applied()),
		deploy,
		core("Secret", "creds", condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonNotOwned, "Secret shop/creds exists and is not Flotilla's")),
		core("ServiceAccount", "runner"),
	)
	before := work.DeepCopy()

	st := Cluster(ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: work})

	if st.Endpoints == nil {
		t.Fatal("no endpoints, want {2 1}")
	}
	if *st.Endpoints != (flotillav1.EndpointsStatus{Ready: 2, NotReady: 1}) {
		t.Errorf("endpoints %+v, want {Ready:2 NotReady:1}", *st.Endpoints)
	}
	if st.Endpoints == work.Status.Manifests[1].Endpoints {
		t.Errorf("the endpoints share the Work's pointer: writing the MyApp's status would alias the cache")
	}
	want := []flotillav1.DependencyStatus{
		{Kind: "ConfigMap", Name: "settings", State: flotillav1.ReasonApplied},
		{Kind: "Secret", Name: "creds", State: flotillav1.ReasonNotOwned, Message: "Secret shop/creds exists and is not Flotilla's"},
		{Kind: "ServiceAccount", Name: "runner", State: "Pending"},
	}
	if !reflect.DeepEqual(st.Dependencies, want) {
		t.Errorf("dependencies\n%+v\nwant\n%+v", st.Dependencies, want)
	}
	for _, d := range st.Dependencies {
		if d.Kind == "Deployment" || d.Kind == "Service" {
			t.Errorf("%s %s listed as a dependency", d.Kind, d.Name)
		}
	}
	if !reflect.DeepEqual(work, before) {
		t.Errorf("Cluster changed the Work")
	}
	// The rest of the entry is unchanged by the new fields.
	if st.Phase != flotillav1.ClusterAppAvailable {
		t.Errorf("phase %s, want %s", st.Phase, flotillav1.ClusterAppAvailable)
	}
}

func TestClusterObjectsStates(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes
	tests := []struct {
		name string
		m    flotillav1.ManifestStatus
		want *flotillav1.DependencyStatus // nil: not listed
	}{
		{"Applied True", core("ConfigMap", "a", applied()), &flotillav1.DependencyStatus{Kind: "ConfigMap", Name: "a", State: "Applied"}},
		{"Applied True with a message: no message kept",
			core("ConfigMap", "a", condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, "fine")),
			&flotillav1.DependencyStatus{Kind: "ConfigMap", Name: "a", State: "Applied"}},
		{"no conditions is Pending", core("Secret", "s"), &flotillav1.DependencyStatus{Kind: "Secret", Name: "s", State: "Pending"}},
		{"other conditions only is Pending",
			core("Secret", "s", condition(flotillav1.ConditionAvailable, metav1.ConditionTrue, flotillav1.ReasonAvailable, "")),
			&flotillav1.DependencyStatus{Kind: "Secret", Name: "s", State: "Pending"}},
		{"Applied False ApplyFailed",
			core("ServiceAccount", "sa", condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonApplyFailed, "denied")),
			&flotillav1.DependencyStatus{Kind: "ServiceAccount", Name: "sa", State: flotillav1.ReasonApplyFailed, Message: "denied"}},
		{"a long message is cut to 1024 bytes",
			core("ConfigMap", "a", condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonApplyFailed, long)),
			nil /* checked below */},
		{"a core Service is not a dependency", core("Service", "web", applied()), nil},
		{"a ConfigMap of another group is not a dependency",
			flotillav1.ManifestStatus{ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "example.com", Version: "v1", Kind: "ConfigMap", Name: "x"}},
			nil},
		{"an apps/v1 Deployment is not a dependency",
			flotillav1.ManifestStatus{ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Name: "x"}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A Work of only this manifest: no Deployment numbers needed.
			st := Cluster(ClusterView{Name: "a", Member: readyMember("a"), Work: objectsWork(tt.m)})
			if tt.name == "a long message is cut to 1024 bytes" {
				if len(st.Dependencies) != 1 {
					t.Fatalf("dependencies %+v, want one", st.Dependencies)
				}
				d := st.Dependencies[0]
				if d.State != flotillav1.ReasonApplyFailed || len(d.Message) > 1024 || len(d.Message) < 1000 ||
					!strings.HasSuffix(d.Message, truncate.Marker) || !strings.HasPrefix(long, strings.TrimSuffix(d.Message, truncate.Marker)) {
					t.Errorf("state %s, message of %d bytes, want ApplyFailed and at most 1024 bytes of the message, marked as cut", d.State, len(d.Message))
				}
				if !utf8.ValidString(d.Message) {
					t.Errorf("message cut inside a character")
				}
				return
			}
			if tt.want == nil {
				if len(st.Dependencies) != 0 {
					t.Errorf("dependencies %+v, want none", st.Dependencies)
				}
				return
			}
			if len(st.Dependencies) != 1 || st.Dependencies[0] != *tt.want {
				t.Errorf("dependencies %+v, want [%+v]", st.Dependencies, *tt.want)
			}
		})
	}
}

func TestClusterObjectsAtMost32Dependencies(t *testing.T) {
	var ms []flotillav1.ManifestStatus
	for i := range 40 {
		kind := []string{"ConfigMap", "Secret", "ServiceAccount"}[i%3]
		ms = append(ms, core(kind, fmt.Sprintf("dep-%02d", i), applied()))
	}
	// A Service after the cap still gives its endpoints.
	svc := core("Service", "web", applied())
	svc.Endpoints = &flotillav1.EndpointsStatus{Ready: 1}
	ms = append(ms, svc)

	st := Cluster(ClusterView{Name: "a", Member: readyMember("a"), Work: objectsWork(ms...)})
	if len(st.Dependencies) != maxDependencies || maxDependencies != 32 {
		t.Fatalf("%d dependencies (cap %d), want 32", len(st.Dependencies), maxDependencies)
	}
	for i, d := range st.Dependencies {
		if want := fmt.Sprintf("dep-%02d", i); d.Name != want {
			t.Errorf("dependency %d is %s, want %s: the first 32 in report order", i, d.Name, want)
		}
	}
	if st.Endpoints == nil || *st.Endpoints != (flotillav1.EndpointsStatus{Ready: 1}) {
		t.Errorf("endpoints %v, want {1 0} from the Service after the 32 dependencies", st.Endpoints)
	}
}

func TestClusterObjectsNone(t *testing.T) {
	t.Run("a Work without a Service has no endpoints", func(t *testing.T) {
		st := Cluster(ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: objectsWork(core("ConfigMap", "c", applied()))})
		if st.Endpoints != nil {
			t.Errorf("endpoints %+v, want nil", *st.Endpoints)
		}
		if len(st.Dependencies) != 1 {
			t.Errorf("dependencies %+v, want the ConfigMap", st.Dependencies)
		}
	})
	t.Run("a Service the member reported no endpoints for has none", func(t *testing.T) {
		st := Cluster(ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: objectsWork(core("Service", "web", applied()))})
		if st.Endpoints != nil {
			t.Errorf("endpoints %+v, want nil", *st.Endpoints)
		}
	})
	t.Run("only Deployment: no endpoints, no dependencies", func(t *testing.T) {
		st := Cluster(ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: healthyWork(1)})
		if st.Endpoints != nil || st.Dependencies != nil {
			t.Errorf("endpoints %v, dependencies %+v, want nil and nil", st.Endpoints, st.Dependencies)
		}
	})
	t.Run("no Work: no endpoints, no dependencies", func(t *testing.T) {
		st := Cluster(ClusterView{Name: "a", Assigned: 1, Member: readyMember("a")})
		if st.Endpoints != nil || st.Dependencies != nil {
			t.Errorf("endpoints %v, dependencies %+v, want nil and nil", st.Endpoints, st.Dependencies)
		}
	})
	t.Run("an evicted cluster without a Work: none", func(t *testing.T) {
		st := Cluster(ClusterView{Name: "a", Evicted: &flotillav1.EvictedCluster{Name: "a", Replicas: 1}})
		if st.Endpoints != nil || st.Dependencies != nil {
			t.Errorf("endpoints %v, dependencies %+v, want nil and nil", st.Endpoints, st.Dependencies)
		}
	})
}
