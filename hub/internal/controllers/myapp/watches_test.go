package myapp

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// A MemberCluster change enqueues every MyApp, those whose status names
// the cluster first (running, evicted, or placed there), in that order
// whatever the list order: the queue is FIFO, so a lost cluster's apps
// fail over before thousands of others are looked at.
func TestMemberClusterChangeEnqueuesItsAppsFirst(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	uses := map[string]bool{}
	for i := range 40 {
		app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("app-%02d", i)}}
		switch i % 10 {
		case 3:
			app.Status.Clusters = []flotillav1.ClusterAppStatus{{Name: "other"}, {Name: "lost"}}
			uses[app.Name] = true
		case 7:
			app.Status.Placement = &flotillav1.PlacementDecision{Evicted: []flotillav1.EvictedCluster{{Name: "lost"}}}
			uses[app.Name] = true
		case 9:
			app.Status.Placement = &flotillav1.PlacementDecision{Clusters: []flotillav1.TargetCluster{{Name: "lost", Replicas: 1}}}
			uses[app.Name] = true
		default:
			app.Status.Clusters = []flotillav1.ClusterAppStatus{{Name: "other"}}
		}
		objs = append(objs, app)
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()}
	reqs := r.allMyApps(context.Background(), &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "lost"}})
	if len(reqs) != 40 {
		t.Fatalf("%d requests, want every one of the 40 MyApps", len(reqs))
	}
	for i, req := range reqs {
		if want := i < len(uses); uses[req.Name] != want {
			t.Fatalf("request %d is %s (uses the cluster: %v); the %d apps that use it must come first: %v", i, req.Name, uses[req.Name], len(uses), reqs)
		}
	}
}
