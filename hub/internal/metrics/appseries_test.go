package metrics

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// collect scrapes s into "metric{namespace/name cluster kind}=value" lines, sorted.
func collect(t *testing.T, s *AppSeries) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			line := f.GetName() + "{" + labels["namespace"] + "/" + labels["name"] + " " + labels["cluster"]
			if k, ok := labels["kind"]; ok {
				line += " " + k
			}
			out = append(out, line+"}="+formatValue(m))
		}
	}
	slices.Sort(out)
	return out
}

func formatValue(m *dto.Metric) string {
	return strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
}

// TestAppSeriesFollowTheStatus: the series are the MyApps' status as the
// cache holds it at the scrape: a cluster an app left has none, a health
// shift that ended leaves no traffic series, a deleted app's series go
// and the others' stay; a replica that does not lead exports none.
func TestAppSeriesFollowTheStatus(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	app := func(name string, traffic []string, clusters ...flotillav1.ClusterAppStatus) *flotillav1.MyApp {
		a := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
		a.Status.Clusters = clusters
		if traffic != nil {
			a.Status.Traffic = &flotillav1.TrafficStatus{}
			for _, c := range traffic {
				a.Status.Traffic.Clusters = append(a.Status.Traffic.Clusters, flotillav1.ClusterTraffic{Name: c, Weight: 50})
			}
		}
		return a
	}
	web := app("web", []string{"a", "b"}, flotillav1.ClusterAppStatus{Name: "a", Assigned: 2, ReadyReplicas: 1}, flotillav1.ClusterAppStatus{Name: "b", Assigned: 1})
	other := app("other", nil, flotillav1.ClusterAppStatus{Name: "b", Assigned: 3, ReadyReplicas: 3})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(web, other).WithStatusSubresource(&flotillav1.MyApp{}).Build()
	s := &AppSeries{Reader: c}

	if got := collect(t, s); len(got) != 0 {
		t.Fatalf("a replica that does not lead exported %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Start(ctx) }()
	for !s.leading.Load() {
		select {
		case <-done:
			t.Fatal("Start returned")
		default:
		}
	}
	want := []string{
		"flotilla_myapp_replicas{team/other b assigned}=3",
		"flotilla_myapp_replicas{team/other b ready}=3",
		"flotilla_myapp_replicas{team/web a assigned}=2",
		"flotilla_myapp_replicas{team/web a ready}=1",
		"flotilla_myapp_replicas{team/web b assigned}=1",
		"flotilla_myapp_replicas{team/web b ready}=0",
		"flotilla_myapp_traffic_weight_percent{team/web a}=50",
		"flotilla_myapp_traffic_weight_percent{team/web b}=50",
	}
	if got := collect(t, s); !slices.Equal(got, want) {
		t.Fatalf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// web moves from b to c and its health shift ends.
	moved := app("web", nil, flotillav1.ClusterAppStatus{Name: "a", Assigned: 2, ReadyReplicas: 2}, flotillav1.ClusterAppStatus{Name: "c", Assigned: 1, ReadyReplicas: 1})
	cur := &flotillav1.MyApp{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(web), cur); err != nil {
		t.Fatal(err)
	}
	cur.Status = moved.Status
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"flotilla_myapp_replicas{team/other b assigned}=3",
		"flotilla_myapp_replicas{team/other b ready}=3",
		"flotilla_myapp_replicas{team/web a assigned}=2",
		"flotilla_myapp_replicas{team/web a ready}=2",
		"flotilla_myapp_replicas{team/web c assigned}=1",
		"flotilla_myapp_replicas{team/web c ready}=1",
	}
	if got := collect(t, s); !slices.Equal(got, want) {
		t.Fatalf("after web moved to c without a shift:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// web is deleted: other's series stay.
	if err := c.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	want = want[:2]
	if got := collect(t, s); !slices.Equal(got, want) {
		t.Fatalf("after web was deleted:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// No longer leading: nothing.
	cancel()
	<-done
	if got := collect(t, s); len(got) != 0 {
		t.Fatalf("after leading ended: %v", got)
	}
}
