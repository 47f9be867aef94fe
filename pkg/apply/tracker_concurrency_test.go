package apply

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// TestTrackerKeepsEveryUpdateUnderConcurrentUse uses one Applier's record
// of applied Works the way the agent does, from many goroutines at once:
// writers apply, re-apply and delete Works of their own (as the sync
// client and the drift reconciler do), a pruner drops what the hub no
// longer sends (snapshot complete) and readers list what is held (Held
// after a reconnect). Each writer checks that it reads back what it
// wrote, the readers check that every list is consistent, and at the end
// the record must hold exactly the Works that were applied last and not
// deleted or pruned: no update lost, nothing pruned that was kept. Run
// with -race (make test does) it also shows the record needs no outside
// locking.
func TestTrackerKeepsEveryUpdateUnderConcurrentUse(t *testing.T) {
	const writers, worksEach, readers, stale = 8, 40, 2, 20
	a := trackedApplier()

	name := func(w, i int) string { return fmt.Sprintf("ns.writer-%d-app-%d", w, i) }
	keep := sets.New[string]()
	for w := range writers {
		for i := range worksEach {
			keep.Insert(name(w, i))
		}
	}
	// Works applied before the hub stopped sending them: the pruner's.
	for i := range stale {
		w := trackedWork(fmt.Sprintf("ns.stale-%d", i), 1)
		a.tracker.record(w, []Result{appliedObject(w)})
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range worksEach {
				v1, v2 := trackedWork(name(w, i), 1), trackedWork(name(w, i), 2)
				a.tracker.record(v1, []Result{appliedObject(v1)})
				if a.NeedsApply(v1, []kclient.Object{appliedObject(v1).Object}) {
					t.Errorf("%s: NeedsApply right after its apply = true, want false", v1.Name)
				}
				a.tracker.record(v2, []Result{appliedObject(v2)})
				if !a.NeedsApply(v1, []kclient.Object{appliedObject(v1).Object}) {
					t.Errorf("%s: NeedsApply of generation 1 after generation 2 was applied = false, want true", v1.Name)
				}
				if a.NeedsApply(v2, []kclient.Object{appliedObject(v2).Object}) {
					t.Errorf("%s: NeedsApply of the applied generation 2 = true, want false", v2.Name)
				}
				if i%3 == 0 {
					a.tracker.forget(v2.Name)
					if !a.NeedsApply(v2, []kclient.Object{appliedObject(v2).Object}) {
						t.Errorf("%s: NeedsApply after the Work was forgotten = false, want true", v2.Name)
					}
				}
			}
		})
	}
	var readersWG sync.WaitGroup
	for range readers {
		readersWG.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				checkApplied(t, a.Applied(), keep)
				a.tracker.retain(keep)
			}
		})
	}
	wg.Wait()
	close(stop)
	readersWG.Wait()
	// The readers pruned at least once, but perhaps before a writer's
	// last write; prune once more now that all is quiet.
	a.tracker.retain(keep)

	var want []AppliedWork
	for w := range writers {
		for i := range worksEach {
			if i%3 != 0 {
				want = append(want, AppliedWork{Name: name(w, i), UID: types.UID("uid-" + name(w, i)), Generation: 2})
			}
		}
	}
	slices.SortFunc(want, func(x, y AppliedWork) int { return strings.Compare(x.Name, y.Name) })
	if got := a.Applied(); !slices.Equal(got, want) {
		t.Errorf("Applied() after concurrent use holds %d Works, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
}

// checkApplied fails unless list is sorted, has no Work twice and holds
// only Works that were applied: stale ones at generation 1, kept ones at
// generation 1 or 2, each with its own UID.
func checkApplied(t *testing.T, list []AppliedWork, keep sets.Set[string]) {
	t.Helper()
	for i, w := range list {
		if i > 0 && list[i-1].Name >= w.Name {
			t.Errorf("Applied() is not sorted by name or lists a Work twice: %q then %q", list[i-1].Name, w.Name)
		}
		if w.UID != types.UID("uid-"+w.Name) {
			t.Errorf("Applied() lists %s with UID %q, want %q", w.Name, w.UID, "uid-"+w.Name)
		}
		switch {
		case keep.Has(w.Name) && (w.Generation == 1 || w.Generation == 2):
		case strings.HasPrefix(w.Name, "ns.stale-") && w.Generation == 1:
		default:
			t.Errorf("Applied() lists %s at generation %d, which was never applied", w.Name, w.Generation)
		}
	}
}

// trackedWork is Work name at generation gen.
func trackedWork(name string, gen int64) *v1alpha1.Work {
	return &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: gen}}
}

// appliedObject is the one object applying w left: owned by w, at the
// object generation that matches w's.
func appliedObject(w *v1alpha1.Work) Result {
	u := &unstructured.Unstructured{}
	u.SetUID(types.UID("obj-" + w.Name))
	u.SetGeneration(w.Generation)
	u.SetLabels(map[string]string{v1alpha1.LabelWork: v1alpha1.WorkLabelValue(w.Name)})
	u.SetAnnotations(map[string]string{v1alpha1.AnnotationWork: w.Name})
	return Result{Reason: v1alpha1.ReasonApplied, Object: u}
}
