package apply

import (
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
)

// BenchmarkApplyNewWork applies, on the package's envtest apiserver, a new
// Work of one Deployment per iteration, as the agent does: reading through
// a cache of Flotilla's labelled objects (so a new object is confirmed
// absent with a live GET) and recording the applied set in a namespace.
// Its time per operation is Apply's, from the Work to the applied-set
// records and the Deployment (issue 21; docs/benchmarks.md).
func BenchmarkApplyNewWork(b *testing.B) {
	cfg := sharedEnv.Config(b)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	ns := uniqueNamespace()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	owned, err := labels.NewRequirement(v1alpha1.LabelWork, selection.Exists, nil)
	if err != nil {
		b.Fatal(err)
	}
	labelled, err := cache.New(cfg, cache.Options{DefaultLabelSelector: labels.NewSelector().Add(*owned)})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = labelled.Start(ctx) }()
	a := New(crclient.Reader(labelled), writerFor(b, cfg, c), Options{RecordNamespace: ns, Kinds: WorkKinds})
	a.SetIdentity(testFleet, testCluster)
	work := func(i int) *v1alpha1.Work {
		name := fmt.Sprintf("bench-%d", i)
		raw, err := json.Marshal(deployment(ns, name, "registry.example/web:1", 3))
		if err != nil {
			b.Fatal(err)
		}
		return &v1alpha1.Work{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.WorkName(ns, name), Namespace: v1alpha1.ClusterNamespace(testCluster), Generation: 1, UID: types.UID("uid-" + name)},
			Spec:       v1alpha1.WorkSpec{Manifests: []v1alpha1.Manifest{{RawExtension: runtime.RawExtension{Raw: raw}}}},
		}
	}
	// The cache's informer for Deployments starts with the first read.
	if _, err := a.Apply(ctx, work(-1)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := a.Apply(ctx, work(i)); err != nil {
			b.Fatal(err)
		}
	}
}
