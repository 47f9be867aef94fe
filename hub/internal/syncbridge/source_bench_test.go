package syncbridge

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/ssa"
)

// BenchmarkWorkEventAfterWrite server-side applies one new Work per
// iteration on the package's envtest apiserver, as the MyApp controller
// does, and reports how long after the write returned the Work source's
// informer delivered its event (ms-event, the mean; ms-event-p99): the
// most that handing the write's answer straight to the sync server,
// instead of waiting for the informer, could take off the way of a Work
// to its member (issue 21; docs/benchmarks.md: it was tried and measured
// 0.2-0.45 ms, and not kept).
func BenchmarkWorkEventAfterWrite(b *testing.B) {
	ctx, c, informers, src := newSourceEnv(b)
	cluster := freshName("bench")
	ns := flotillav1.ClusterNamespace(cluster)
	var mu sync.Mutex
	seen := map[string]chan time.Time{}
	src.Notify(func(c, name string) {
		at := time.Now()
		if c != cluster {
			return
		}
		mu.Lock()
		ch := seen[name]
		mu.Unlock()
		if ch != nil {
			select {
			case ch <- at:
			default:
			}
		}
	})
	startInformers(ctx, b, informers)
	createNamespace(ctx, b, c, ns)
	delays := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("w-%d", i)
		ch := make(chan time.Time, 1)
		mu.Lock()
		seen[name] = ch
		mu.Unlock()
		w := &flotillav1.Work{
			TypeMeta:   metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "Work"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}`),
			}}}},
		}
		u, err := ssa.Unstructured(w)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("bench"), client.ForceOwnership); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		select {
		case at := <-ch:
			delays = append(delays, at.Sub(returned))
		case <-time.After(30 * time.Second):
			b.Fatalf("the source did not tell of Work %s within 30s", name)
		}
	}
	b.StopTimer()
	var sum time.Duration
	for _, d := range delays {
		sum += d
	}
	slices.Sort(delays)
	b.ReportMetric(float64(sum.Microseconds())/1000/float64(len(delays)), "ms-event")
	b.ReportMetric(float64(delays[(len(delays)*99)/100].Microseconds())/1000, "ms-event-p99")
}
