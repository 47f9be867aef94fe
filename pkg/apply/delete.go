package apply

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Delete deletes every object applied for the Work called workName: objects
// of the Applier's kinds, in any namespace, that carry the Work's label and
// annotation. It returns what it deleted. Objects are deleted in the
// background (the garbage collector removes their ReplicaSets and pods
// afterwards) and only if their UID is still the one listed, so an object
// replaced meanwhile is left alone.
//
// Objects are listed through the reader: with a cache, one created moments
// ago may not be listed yet. Callers that need certainty call Delete again,
// or rely on a later Prune.
func (a *Applier) Delete(ctx context.Context, workName string) ([]v1alpha1.ResourceIdentifier, error) {
	// The Work is going away whether or not every delete succeeds: it no
	// longer counts as applied.
	a.tracker.forget(workName)
	deleted, err := a.deleteOwned(ctx,
		client.MatchingLabels{v1alpha1.LabelWork: v1alpha1.WorkLabelValue(workName)},
		func(owner string) bool { return owner == workName })
	if err != nil {
		return deleted, fmt.Errorf("deleting the objects of Work %s: %w", workName, err)
	}
	return deleted, nil
}

// Prune deletes every object Flotilla owns in the cluster (of the Applier's
// kinds, carrying a consistent flotilla.dev/work label and annotation)
// whose Work is not in keep, and returns what it deleted. Objects without
// Flotilla's label, or whose label and annotation disagree, are never
// touched. The caller calls it only after a complete snapshot of the Works
// the cluster should run: anything missing from keep is deleted.
func (a *Applier) Prune(ctx context.Context, keep sets.Set[string]) ([]v1alpha1.ResourceIdentifier, error) {
	a.tracker.retain(keep)
	deleted, err := a.deleteOwned(ctx, client.HasLabels{v1alpha1.LabelWork},
		func(owner string) bool { return !keep.Has(owner) })
	if err != nil {
		return deleted, fmt.Errorf("pruning objects of Works no longer wanted: %w", err)
	}
	return deleted, nil
}

// deleteOwned lists the Applier's kinds with selector and deletes each
// owned object whose owning Work name passes match.
func (a *Applier) deleteOwned(ctx context.Context, selector client.ListOption, match func(workName string) bool) ([]v1alpha1.ResourceIdentifier, error) {
	var deleted []v1alpha1.ResourceIdentifier
	var errs []error
	for _, gvk := range a.kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := a.reader.List(ctx, list, selector); err != nil {
			if meta.IsNoMatchError(err) {
				// The cluster does not serve this kind, so nothing of it
				// was applied.
				continue
			}
			errs = append(errs, fmt.Errorf("listing %s: %w", gvk.Kind, err))
			continue
		}
		for i := range list.Items {
			obj := &list.Items[i]
			owner := owningWork(obj)
			if owner == "" || !match(owner) || obj.GetDeletionTimestamp() != nil {
				continue
			}
			id := v1alpha1.ResourceIdentifier{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
			err := a.writer.Delete(ctx, obj,
				client.PropagationPolicy(metav1.DeletePropagationBackground),
				client.Preconditions{UID: new(obj.GetUID())})
			switch {
			case err == nil:
				log.FromContext(ctx).Info("deleted", "work", owner, "object", describe(id))
				deleted = append(deleted, id)
			case apierrors.IsNotFound(err):
				// Someone else deleted it first.
			default:
				errs = append(errs, fmt.Errorf("deleting %s of Work %s: %w", describe(id), owner, err))
			}
		}
	}
	return deleted, errors.Join(errs...)
}
