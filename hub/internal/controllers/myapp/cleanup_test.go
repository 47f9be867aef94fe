package myapp

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// terminating is w deleted ago before t0, held by the member-cleanup
// finalizer unless held is false.
func terminating(w *flotillav1.Work, ago time.Duration, held bool) *flotillav1.Work {
	w.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-ago)))
	w.Finalizers = nil
	if held {
		w.Finalizers = []string{flotillav1.WorkFinalizer}
	}
	return w
}

func TestExpiredWorks(t *testing.T) {
	base := app()
	existing := map[string]*flotillav1.Work{
		"a": current(t, base, "a", 2),                                    // live
		"b": terminating(current(t, base, "b", 2), 11*time.Minute, true), // past the timeout
		"c": terminating(current(t, base, "c", 2), 4*time.Minute, true),  // 6 minutes left
		"d": terminating(current(t, base, "d", 2), time.Hour, false),     // someone else's finalizer only
	}
	expired, next := expiredWorks(existing, t0, 10*time.Minute)
	if got := clusterNames(expired); len(got) != 1 || got[0] != "b" {
		t.Errorf("expired = %v, want [b]", got)
	}
	if next != 6*time.Minute {
		t.Errorf("next expiry in %s, want 6m", next)
	}
	if expired, next := expiredWorks(map[string]*flotillav1.Work{"a": existing["a"]}, t0, time.Minute); expired != nil || next != 0 {
		t.Errorf("nothing terminating: expired %v, next %s", clusterNames(expired), next)
	}
}

func TestOrphansAfter(t *testing.T) {
	base := app()
	earlier := metav1.NewTime(t0.Add(-time.Hour))
	prev := []flotillav1.OrphanedWork{
		{Cluster: "a", Work: "shop.web", Since: earlier}, // runs there again: dropped
		{Cluster: "c", Work: "shop.web", Since: earlier}, // stays
	}
	expired := []*flotillav1.Work{terminating(current(t, base, "b", 2), 11*time.Minute, true)}
	got := orphansAfter(prev, expired, []flotillav1.TargetCluster{{Name: "a", Replicas: 2}}, t0, 10*time.Minute)
	if len(got) != 2 || got[0].Cluster != "b" || got[1].Cluster != "c" {
		t.Fatalf("orphans = %+v, want b (new) and c (kept)", got)
	}
	if !got[0].Since.Time.Equal(t0) || got[0].Work != "shop.web" || got[0].Message == "" {
		t.Errorf("new entry %+v: want since %s, work shop.web and a message", got[0], t0)
	}
	if !got[1].Since.Equal(&earlier) {
		t.Errorf("kept entry changed: %+v", got[1])
	}
	if len(prev) != 2 || prev[0].Cluster != "a" {
		t.Errorf("orphansAfter changed its input: %+v", prev)
	}
	if got := orphansAfter(nil, nil, nil, t0, time.Minute); got != nil {
		t.Errorf("no orphans: got %+v, want nil", got)
	}
}
