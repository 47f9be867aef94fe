package apply

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Forget drops Work workName's applied-set record and deletes nothing
// else: the Work vanished from the hub without the hub meaning to delete
// it, so its objects are orphaned. They keep running and keep Flotilla's
// labels and field ownership, but no Delete or Prune can reach them any
// more, since both act only on recorded objects. A Work of the same name
// applied later adopts them again: server-side apply takes the same
// fields, and the record is written anew.
//
// A shared dependency the Work used that other Works still hold stays
// theirs, marked with v1alpha1.AnnotationKeptForOrphans first: the
// orphaned pods may still use it, so when its last holder goes it is
// released, not deleted.
//
// The record's ConfigMap is deleted before the Applier forgets the Work in
// memory, so a Forget that fails leaves the Work held (Applied still lists
// it) and is to be called again. Forget needs no fleet identity and no
// Fence: it deletes nothing the member runs.
func (a *Applier) Forget(ctx context.Context, workName string) error {
	ctx = quiet(ctx)
	unlock := a.locks.lock(workName)
	defer unlock()
	if err := a.ensureLoaded(ctx); err != nil {
		return fmt.Errorf("forgetting Work %s: %w", workName, err)
	}
	// No deletion decides about a shared object until the mark is on it
	// and the record gone.
	a.sharedMu.Lock()
	defer a.sharedMu.Unlock()
	if err := a.markKeptForOrphans(ctx, workName); err != nil {
		return fmt.Errorf("forgetting Work %s: %w", workName, err)
	}
	if a.recordNamespace != "" {
		// Unconditionally, not only the version last read: under the
		// Work's lock nothing in this Applier adds to the record, and an
		// object someone else recorded meanwhile is to be orphaned too.
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		cm.SetNamespace(a.recordNamespace)
		cm.SetName(RecordName(a.owner, workName))
		if err := a.writer.Delete(ctx, cm, kclient.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("forgetting Work %s: deleting its applied-set record (ConfigMap %s/%s): %w", workName, a.recordNamespace, cm.GetName(), err)
		}
	}
	a.set.put(&record{work: workName})
	a.tracker.forget(workName)
	return nil
}

// markKeptForOrphans puts v1alpha1.AnnotationKeptForOrphans on every
// shared dependency Work work's record holds that another Work holds too
// (one only this Work held is simply left unrecorded, like its other
// objects). The caller holds sharedMu.
func (a *Applier) markKeptForOrphans(ctx context.Context, work string) error {
	rec := a.set.get(work)
	if rec == nil {
		return nil
	}
	for _, o := range rec.objects {
		if len(a.set.holders(o.ResourceIdentifier, work)) == 0 {
			continue
		}
		gvk := schema.GroupVersionKind{Group: o.Group, Version: o.Version, Kind: o.Kind}
		live, err := a.getLive(ctx, gvk, kclient.Key{Namespace: o.Namespace, Name: o.Name})
		if err != nil {
			return fmt.Errorf("reading %s: %w", describe(o.ResourceIdentifier), err)
		}
		if live == nil || !IsShared(live) || live.GetAnnotations()[v1alpha1.AnnotationKeptForOrphans] == "true" {
			continue
		}
		patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationKeptForOrphans + `":"true"}}}`)
		if err := a.writer.Patch(ctx, live, types.MergePatchType, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking %s kept for the orphaned Work: %w", describe(o.ResourceIdentifier), err)
		}
		log.FromContext(ctx).Info("a shared dependency of an orphaned Work stays with the Works that still use it, and will be released, not deleted", "work", work, "object", describe(o.ResourceIdentifier))
	}
	return nil
}
