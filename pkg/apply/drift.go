package apply

import (
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// tracker remembers what the last successful Apply of each Work left in the
// cluster, so NeedsApply can tell drift from noise without an API call.
type tracker struct {
	mu    sync.Mutex
	works map[string]appliedWork
}

// appliedWork is the record of one Work's last successful Apply.
type appliedWork struct {
	uid        types.UID
	generation int64
	// objects maps each applied object's UID to its version right after
	// the apply.
	objects map[types.UID]objectVersion
}

// objectVersion is what NeedsApply compares: metadata.generation for kinds
// that keep one (it moves only when the spec changes, not on status
// updates), otherwise the resourceVersion, which moves on any write.
type objectVersion struct {
	generation      int64
	resourceVersion string
}

func versionOf(obj kclient.Object) objectVersion {
	if g := obj.GetGeneration(); g != 0 {
		return objectVersion{generation: g}
	}
	return objectVersion{resourceVersion: obj.GetResourceVersion()}
}

func (t *tracker) record(work *v1alpha1.Work, results []Result) {
	rec := appliedWork{uid: work.UID, generation: work.Generation, objects: make(map[types.UID]objectVersion, len(results))}
	for _, r := range results {
		if r.Object != nil {
			rec.objects[r.Object.GetUID()] = versionOf(r.Object)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.works[work.Name] = rec
}

// restore adds the drift record each of records proves (see
// record.drift) for the Works t does not track yet: what this process
// applied is at least as new as what it wrote.
func (t *tracker) restore(records map[string]*record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, r := range records {
		if _, ok := t.works[name]; ok {
			continue
		}
		if w, ok := r.drift(); ok {
			t.works[name] = w
		}
	}
}

func (t *tracker) forget(workName string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.works, workName)
}

func (t *tracker) retain(keep sets.Set[string]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name := range t.works {
		if !keep.Has(name) {
			delete(t.works, name)
		}
	}
}

// NeedsApply says whether work must be applied again to make the cluster
// match it, judged without any API call from what the last successful Apply
// recorded and from live, the Work's objects as the caller sees them now
// (typically every object in its cache labelled for the Work; objects of
// other Works are ignored). It returns true when:
//
//   - no Apply of the Work has succeeded yet (or the last one failed), in
//     this process or, after a restart, as the Work's applied-set record
//     proves (see Load);
//   - the Work changed: another generation, or another UID (deleted and
//     created again, which restarts the generation);
//   - an applied object is missing from live (deleted, or replaced by one
//     with another UID);
//   - an applied object's metadata.generation moved since the apply,
//     meaning someone changed its spec (for kinds without a generation:
//     any change of its resourceVersion);
//   - an applied object lost Flotilla's label or annotation, or does not
//     carry the fleet id the Applier has now (SetIdentity after the apply).
//
// Status updates do not move metadata.generation, so a Deployment rolling
// out does not look like drift. Changes that leave the generation alone (a
// label edited by hand on an object that keeps Flotilla's own) are not
// seen; the next Apply for another reason restores them.
func (a *Applier) NeedsApply(work *v1alpha1.Work, live []kclient.Object) bool {
	a.tracker.mu.Lock()
	rec, ok := a.tracker.works[work.Name]
	a.tracker.mu.Unlock()
	if !ok || rec.generation != work.Generation || rec.uid != work.UID {
		return true
	}
	fleet, _ := a.Identity()
	found := 0
	for _, obj := range live {
		want, applied := rec.objects[obj.GetUID()]
		if !applied {
			continue
		}
		found++
		if versionOf(obj) != want || !(OwnedBy(obj, work.Name) || IsShared(obj)) || obj.GetLabels()[v1alpha1.LabelFleet] != fleet {
			return true
		}
	}
	return found < len(rec.objects)
}

// AppliedWork is a Work whose last Apply succeeded.
type AppliedWork struct {
	Name       string
	UID        types.UID
	Generation int64
}

// Applied lists, sorted by name, the Works whose last Apply succeeded and
// that were not deleted or pruned since. After a restart it lists what the
// applied-set records prove was applied (see Load): a Work whose record
// names its UID and generation and a UID and version for every object;
// without a RecordNamespace it starts empty. A caller that must report
// only what it was sent in this process (pkg/works Store.Held) filters
// by what it holds.
func (a *Applier) Applied() []AppliedWork {
	a.tracker.mu.Lock()
	out := make([]AppliedWork, 0, len(a.tracker.works))
	for name, rec := range a.tracker.works {
		out = append(out, AppliedWork{Name: name, UID: rec.uid, Generation: rec.generation})
	}
	a.tracker.mu.Unlock()
	slices.SortFunc(out, func(x, y AppliedWork) int { return strings.Compare(x.Name, y.Name) })
	return out
}
