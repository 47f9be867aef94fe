package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// ErrNoIdentity is returned by Delete and Prune (and by an Apply that
// would delete objects its Work dropped) of an Applier whose fleet id is
// not set: a deletion it cannot tie to its fleet is exactly how another
// hub's, or a restored hub's, view of the world would remove running
// workloads.
var ErrNoIdentity = errors.New("the applier has no fleet identity (SetIdentity was not called), so it deletes nothing")

// Delete deletes the objects recorded in Work workName's applied set and
// then the record, and returns what it deleted. It is not braked: deleting
// one Work is what the hub asked for, one Work at a time.
//
// An object is deleted only when it still is what was recorded: the same
// UID (or, for an object recorded just before its first apply, any UID),
// owned by the Work (its label and annotation), and carrying the Applier's
// fleet id and cluster name. Objects are deleted in the background (the
// garbage collector removes their ReplicaSets and pods afterwards) with
// the live UID as a precondition, so an object replaced meanwhile is left
// alone. An object that is gone, replaced or no longer Flotilla's is
// dropped from the record and left alone; one whose deletion failed stays
// recorded and makes Delete return an error, to be called again.
//
// The Fence is called before anything is deleted. Without a fleet id,
// Delete returns ErrNoIdentity.
func (a *Applier) Delete(ctx context.Context, workName string) ([]v1alpha1.ResourceIdentifier, error) {
	ctx = quiet(ctx)
	// The Work is going away whether or not every delete succeeds: it no
	// longer counts as applied. Forgotten again once the Work's lock is
	// held, since a first load of the records (deleteWork) restores it.
	a.tracker.forget(workName)
	unlock := a.locks.lock(workName)
	defer unlock()
	defer a.tracker.forget(workName)
	deleted, err := a.deleteWork(ctx, workName)
	if err != nil {
		return deleted, fmt.Errorf("deleting the objects of Work %s: %w", workName, err)
	}
	return deleted, nil
}

// deleteWork deletes what Work workName's record holds; the caller holds
// the Work's lock.
func (a *Applier) deleteWork(ctx context.Context, workName string) ([]v1alpha1.ResourceIdentifier, error) {
	if err := a.ensureLoaded(ctx); err != nil {
		return nil, err
	}
	if fleet, _ := a.Identity(); fleet == "" {
		return nil, ErrNoIdentity
	}
	rec := a.set.get(workName)
	if rec == nil {
		return nil, nil
	}
	if err := a.mayDelete(ctx); err != nil {
		return nil, err
	}
	return a.deleteRecorded(ctx, workName, rec.objects)
}

// Prune deletes the recorded objects of every Work not in keep, under the
// rules of Delete, and returns what it deleted. It acts only on the
// applied set: an object that carries Flotilla's labels but is not
// recorded (applied by another agent, another fleet, a hand copy) is never
// deleted. The caller calls it only after a complete snapshot of the
// Works the cluster should run.
//
// Unless confirmed, a prune that would delete more objects than the
// Applier's Brake allows deletes nothing and returns a *PruneBlockedError.
// The Fence is called before anything is deleted; without a fleet id,
// Prune returns ErrNoIdentity.
func (a *Applier) Prune(ctx context.Context, keep sets.Set[string], confirmed bool) ([]v1alpha1.ResourceIdentifier, error) {
	ctx = quiet(ctx)
	a.tracker.retain(keep)
	if err := a.ensureLoaded(ctx); err != nil {
		return nil, fmt.Errorf("pruning: %w", err)
	}
	// Again: a first load restores what the records prove, kept or not.
	a.tracker.retain(keep)
	if fleet, _ := a.Identity(); fleet == "" {
		return nil, fmt.Errorf("pruning: %w", ErrNoIdentity)
	}
	held, wouldDelete := 0, 0
	var works []string
	for _, r := range a.set.all() {
		held += len(r.objects)
		if !keep.Has(r.work) {
			// Released objects keep running: only deletions weigh on the
			// brake.
			if effectivePolicy(r) == v1alpha1.DeletionPolicyDelete {
				wouldDelete += len(r.objects)
			}
			works = append(works, r.work)
		}
	}
	if len(works) == 0 {
		return nil, nil
	}
	if !confirmed && BrakeHolds(wouldDelete, held, a.brake) {
		return nil, &PruneBlockedError{WouldDelete: wouldDelete, Held: held, Works: works, Brake: a.brake}
	}
	if err := a.mayDelete(ctx); err != nil {
		return nil, fmt.Errorf("pruning: %w", err)
	}
	var deleted []v1alpha1.ResourceIdentifier
	var errs []error
	for _, name := range works {
		unlock := a.locks.lock(name)
		// Read the record again under the Work's lock: it is the one to
		// act on.
		var d []v1alpha1.ResourceIdentifier
		var err error
		if rec := a.set.get(name); rec != nil {
			d, err = a.deleteRecorded(ctx, name, rec.objects)
		}
		unlock()
		deleted = append(deleted, d...)
		if err != nil {
			errs = append(errs, fmt.Errorf("pruning Work %s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return deleted, fmt.Errorf("pruning objects of Works no longer wanted: %w", err)
	}
	return deleted, nil
}

// mayDelete says whether the Applier may delete now: it has a fleet id
// and its Fence passes.
func (a *Applier) mayDelete(ctx context.Context) error {
	if fleet, _ := a.Identity(); fleet == "" {
		return ErrNoIdentity
	}
	if a.fence != nil {
		if err := a.fence(ctx); err != nil {
			return fmt.Errorf("the fence refused deletion, nothing was deleted: %w", err)
		}
	}
	return nil
}

// recordIntent adds to Work work's record the objects of ids it does not
// hold yet, without UIDs, before they are applied, and the Work's deletion
// policy. The caller holds the Work's lock. Re-applying a Work whose
// objects are all recorded, with the same policy, writes nothing.
func (a *Applier) recordIntent(ctx context.Context, work string, ids []v1alpha1.ResourceIdentifier, policy v1alpha1.DeletionPolicy) error {
	if policy == "" {
		policy = v1alpha1.DeletionPolicyDelete
	}
	rec := a.set.get(work)
	if rec == nil {
		rec = &record{work: work, policy: v1alpha1.DeletionPolicyDelete}
	}
	objects := slices.Clone(rec.objects)
	for _, id := range ids {
		if rec.find(id) < 0 {
			objects = append(objects, AppliedObject{ResourceIdentifier: id})
		}
	}
	if len(objects) == len(rec.objects) && effectivePolicy(rec) == policy {
		return nil
	}
	// The objects are not applied yet: the record proves nothing until an
	// Apply succeeds, so it goes without a mark.
	return a.writeRecordMarked(ctx, work, objects, policy, appliedMark{})
}

// effectivePolicy is r's deletion policy, Delete when unset.
func effectivePolicy(r *record) v1alpha1.DeletionPolicy {
	if r == nil || r.policy == "" {
		return v1alpha1.DeletionPolicyDelete
	}
	return r.policy
}

// recordApplied writes the UIDs the apply of work returned into the
// Work's record, and drops the entries recorded without a UID whose object
// turned out to be someone else's (NotOwned): this Applier did not create
// them. The caller holds the Work's lock; nothing is written when no UID
// changed (versions alone are recordDrift's business, which never fails an
// Apply).
//
// When it writes, the applied objects carry the versions the apply
// returned, and, when every manifest applied (allApplied) and the record
// holds nothing else, the Work's mark: the first apply of a Work records
// its drift record with the UIDs, in the same request.
func (a *Applier) recordApplied(ctx context.Context, work *v1alpha1.Work, results []Result, allApplied bool) error {
	rec := a.set.get(work.Name)
	if rec == nil {
		rec = &record{work: work.Name}
	}
	objects := slices.Clone(rec.objects)
	changed := false
	for _, r := range results {
		i := slices.IndexFunc(objects, func(o AppliedObject) bool { return o.ResourceIdentifier == r.Identifier })
		switch {
		case r.Applied() && i < 0:
			objects = append(objects, AppliedObject{ResourceIdentifier: r.Identifier, UID: r.Object.GetUID()})
			changed = true
		case r.Applied() && objects[i].UID != r.Object.GetUID():
			objects[i].UID = r.Object.GetUID()
			changed = true
		case r.Reason == v1alpha1.ReasonNotOwned && i >= 0 && objects[i].UID == "":
			objects = slices.Delete(objects, i, i+1)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	stamped, complete := stampVersions(objects, results)
	var mark appliedMark
	if allApplied && complete {
		mark = appliedMark{uid: work.UID, generation: work.Generation}
	}
	if err := a.writeRecordMarked(ctx, work.Name, stamped, rec.policy, mark); err != nil {
		return fmt.Errorf("recording the applied objects' UIDs: %w", err)
	}
	return nil
}

// stampVersions returns objects with each one an applied Result names
// carrying the UID and version the apply returned, and says whether every
// object got them from results (complete): only then do objects say what
// this apply left.
func stampVersions(objects []AppliedObject, results []Result) (stamped []AppliedObject, complete bool) {
	stamped = slices.Clone(objects)
	complete = true
	for i, o := range stamped {
		j := slices.IndexFunc(results, func(r Result) bool { return r.Applied() && r.Identifier == o.ResourceIdentifier })
		if j < 0 {
			complete = false
			continue
		}
		obj := results[j].Object
		o.UID = obj.GetUID()
		stamped[i] = o.withVersion(versionOf(obj))
	}
	return stamped, complete
}

// recordDrift stores, after an Apply of work that succeeded whole, the
// Work's mark and the versions the apply returned in the Work's record,
// so that a restarted Applier resumes from them (see Load). It writes only
// when they differ from what the record holds: a new Work generation, an
// object whose generation moved (a drift repair). A failed write is logged
// and leaves the record as it was, which proves less, never more: NeedsApply
// after a restart says true, and the next Apply writes again. The caller
// holds the Work's lock.
func (a *Applier) recordDrift(ctx context.Context, work *v1alpha1.Work, results []Result) {
	if a.recordNamespace == "" {
		return
	}
	rec := a.set.get(work.Name)
	if rec == nil || len(rec.objects) == 0 {
		return
	}
	stamped, complete := stampVersions(rec.objects, results)
	mark := appliedMark{uid: work.UID, generation: work.Generation}
	if !complete || (rec.mark == mark && slices.Equal(stamped, rec.objects)) {
		return
	}
	if err := a.writeRecordMarked(ctx, work.Name, stamped, rec.policy, mark); err != nil {
		log.FromContext(ctx).Error(err, "recording the drift record of an applied Work; a restart will apply it again", "work", work.Name)
		return
	}
	if now := a.set.get(work.Name); now == nil || now.mark != mark {
		// The write kept objects another writer had recorded (the union):
		// this Apply did not leave them, so the Work needs another, which
		// removes what it no longer names.
		a.tracker.forget(work.Name)
	}
}

// deleteDropped deletes the objects Work work's record holds that wanted
// (what the Work names now) does not. The caller holds the Work's lock.
func (a *Applier) deleteDropped(ctx context.Context, work string, wanted []v1alpha1.ResourceIdentifier) error {
	rec := a.set.get(work)
	if rec == nil {
		return nil
	}
	var dropped []AppliedObject
	for _, o := range rec.objects {
		if !slices.Contains(wanted, o.ResourceIdentifier) {
			dropped = append(dropped, o)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	if err := a.mayDelete(ctx); err != nil {
		return err
	}
	_, err := a.deleteRecorded(ctx, work, dropped)
	return err
}

// deleteRecorded deletes objs, entries of Work work's record, or, when the
// record's deletion policy is Orphan, releases them (see releaseObject),
// and removes from the record every entry it is done with (deleted,
// released, gone, or no longer the Work's); entries whose deletion failed
// stay. It returns what it deleted, never what it released. The caller
// holds the Work's lock and checked mayDelete.
func (a *Applier) deleteRecorded(ctx context.Context, work string, objs []AppliedObject) ([]v1alpha1.ResourceIdentifier, error) {
	var deleted []v1alpha1.ResourceIdentifier
	var errs []error
	done := map[v1alpha1.ResourceIdentifier]bool{}
	orphan := effectivePolicy(a.set.get(work)) == v1alpha1.DeletionPolicyOrphan
	for _, o := range objs {
		var ok bool
		var err error
		verb := "deleting"
		if orphan {
			verb = "releasing"
			err = a.releaseObject(ctx, work, o)
		} else {
			ok, err = a.deleteObject(ctx, work, o)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", verb, describe(o.ResourceIdentifier), err))
			continue
		}
		done[o.ResourceIdentifier] = true
		if ok {
			deleted = append(deleted, o.ResourceIdentifier)
		}
	}
	// An empty objs cleans up an empty record.
	if len(done) > 0 || len(objs) == 0 {
		var rest []AppliedObject
		if rec := a.set.get(work); rec != nil {
			for _, o := range rec.objects {
				if !done[o.ResourceIdentifier] {
					rest = append(rest, o)
				}
			}
		}
		if err := a.writeRecord(ctx, work, rest); err != nil {
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}

// deleteObject deletes the live object o names when it is still the one
// recorded for Work work (see Delete). It returns true when it deleted it,
// false when there was nothing of this Work's to delete, and an error when
// the deletion should be tried again.
func (a *Applier) deleteObject(ctx context.Context, work string, o AppliedObject) (bool, error) {
	if isNamespace(o.ResourceIdentifier) {
		// Deleting a namespace deletes everything in it, whoever put it
		// there: no Work owns that much. The entry is dropped and the
		// namespace left, as for an object that is no longer the Work's.
		log.FromContext(ctx).Info("not deleting a namespace: an applier never deletes one", "work", work, "namespace", o.Name)
		return false, nil
	}
	live, logger, err := a.recordedLive(ctx, work, o, "deleting")
	if err != nil || live == nil {
		return false, err
	}
	if live.GetDeletionTimestamp() != nil {
		return false, nil
	}
	if IsShared(live) {
		// Decided and done under the write side of sharedMu: an Apply
		// that counts on the object records it first, under the read side.
		a.sharedMu.Lock()
		defer a.sharedMu.Unlock()
		if holders := a.set.holders(o.ResourceIdentifier, work); len(holders) > 0 {
			logger.Info("not deleting a shared dependency other Works still use", "works", holders)
			return false, nil
		}
		if live.GetAnnotations()[v1alpha1.AnnotationKeptForOrphans] == "true" {
			// An orphaned Work's pods may still use it.
			return false, a.release(ctx, live, logger)
		}
	}
	err = a.writer.Delete(ctx, live, kclient.DeleteOptions{
		Propagation:   metav1.DeletePropagationBackground,
		Preconditions: metav1.Preconditions{UID: new(live.GetUID())},
	})
	switch {
	case err == nil:
		logger.Info("deleted", "uid", live.GetUID())
		return true, nil
	case apierrors.IsNotFound(err):
		// Someone else deleted it first.
		return false, nil
	default:
		return false, err
	}
}

// recordedLive reads the live object o names and returns it when it
// still is the one recorded for Work work: the recorded UID (when one was
// recorded) and the Work's and the Applier's identity (notDeletable). It
// returns nil, with a log line saying why (verb: what the caller would
// do), when there is nothing of the Work's to act on, and an error when
// the read failed.
func (a *Applier) recordedLive(ctx context.Context, work string, o AppliedObject, verb string) (*unstructured.Unstructured, logr.Logger, error) {
	logger := log.FromContext(ctx).WithValues("work", work, "object", describe(o.ResourceIdentifier))
	gvk := schema.GroupVersionKind{Group: o.Group, Version: o.Version, Kind: o.Kind}
	live, err := a.getLive(ctx, gvk, kclient.Key{Namespace: o.Namespace, Name: o.Name})
	switch {
	case meta.IsNoMatchError(err):
		// The cluster no longer serves the kind, so the object is gone.
		return nil, logger, nil
	case err != nil:
		return nil, logger, fmt.Errorf("reading it: %w", err)
	case live == nil:
		return nil, logger, nil
	}
	if o.UID != "" && live.GetUID() != o.UID {
		logger.Info("not "+verb+" an object that replaced the recorded one", "recordedUID", o.UID, "uid", live.GetUID())
		return nil, logger, nil
	}
	if reason := a.notDeletable(live, work); reason != "" {
		logger.Info("not "+verb+" a recorded object that is no longer the Work's: "+reason, "uid", live.GetUID())
		return nil, logger, nil
	}
	return live, logger, nil
}

// notDeletable says why live may not be deleted as Work work's object, or
// "" when it may: it must be owned by the Work (OwnedBy) or be a shared
// dependency (IsShared), and carry the Applier's fleet id and cluster
// name.
func (a *Applier) notDeletable(live *unstructured.Unstructured, work string) string {
	fleet, cluster := a.Identity()
	labels := live.GetLabels()
	switch {
	case !OwnedBy(live, work) && !IsShared(live):
		return "it lacks the Work's label or annotation"
	case labels[v1alpha1.LabelFleet] != fleet:
		return fmt.Sprintf("its %s label is %q, not this applier's %q", v1alpha1.LabelFleet, labels[v1alpha1.LabelFleet], fleet)
	case labels[v1alpha1.LabelCluster] != cluster:
		return fmt.Sprintf("its %s label is %q, not this applier's %q", v1alpha1.LabelCluster, labels[v1alpha1.LabelCluster], cluster)
	default:
		return ""
	}
}

// isNamespace says id names a Namespace.
func isNamespace(id v1alpha1.ResourceIdentifier) bool {
	return id.Group == "" && id.Kind == "Namespace"
}

// keyedMutex is a mutex per key, dropped when nobody holds or waits for it.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	sync.Mutex
	refs int
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
