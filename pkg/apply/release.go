package apply

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// releasedLabels are the labels Apply puts on an object, which a release
// takes off.
var releasedLabels = []string{
	v1alpha1.LabelWork, v1alpha1.LabelFleet, v1alpha1.LabelCluster,
	v1alpha1.LabelMyAppName, v1alpha1.LabelMyAppNamespace, v1alpha1.LabelDependency,
}

// releaseObject hands the live object o names back to the member, when it
// still is the one recorded for Work work (the checks of deleteObject):
// it keeps running, without Flotilla's labels and annotation and without
// the Applier's field ownership (its managedFields entries), so no later
// apply, prune or drift repair of this or another Flotilla agent touches
// it, and whoever manages it next owns its fields alone. It is one merge
// patch, conditional on the object's resourceVersion: an object changed
// meanwhile is read again on the next call. A gone, replaced or no longer
// Flotilla's object needs nothing and returns nil.
func (a *Applier) releaseObject(ctx context.Context, work string, o AppliedObject) error {
	live, logger, err := a.recordedLive(ctx, work, o, "releasing")
	if err != nil || live == nil {
		return err
	}
	if IsShared(live) {
		a.sharedMu.Lock()
		defer a.sharedMu.Unlock()
		if holders := a.set.holders(o.ResourceIdentifier, work); len(holders) > 0 {
			logger.Info("not releasing a shared dependency other Works still use", "works", holders)
			return nil
		}
	}
	return a.release(ctx, live, logger)
}

// release takes Flotilla's labels, annotations and field ownership off
// live (see releaseObject).
func (a *Applier) release(ctx context.Context, live *unstructured.Unstructured, logger logr.Logger) error {
	if a.lacksManagedFields(live) {
		// Read them through the writer. The object checked is the one
		// released only at the same resourceVersion; one changed since is
		// read again on the next call, as a conflict would be.
		fresh, err := a.readThroughWriter(ctx, live)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading its field managers: %w", err)
		case fresh.GetResourceVersion() != live.GetResourceVersion():
			return fmt.Errorf("it changed since the cache read it (resourceVersion %s, now %s); it is read again on the next try", live.GetResourceVersion(), fresh.GetResourceVersion())
		}
		live = fresh
	}
	patch, err := releasePatch(live.GetLabels(), live.GetAnnotations(), live.GetManagedFields(), a.owner, live.GetResourceVersion())
	if err != nil {
		return err
	}
	err = a.writer.Patch(ctx, live, types.MergePatchType, patch)
	switch {
	case err == nil:
		logger.Info("released: it keeps running, no longer managed by Flotilla", "uid", live.GetUID())
		return nil
	case apierrors.IsNotFound(err):
		return nil
	default:
		return err
	}
}

// releasePatch is the merge patch that removes Flotilla's labels and
// annotation and the managedFields entries of manager owner, at
// resourceVersion rv.
func releasePatch(labels, annotations map[string]string, managed []metav1.ManagedFieldsEntry, owner, rv string) ([]byte, error) {
	md := map[string]any{"resourceVersion": rv}
	dropLabels := map[string]any{}
	for _, k := range releasedLabels {
		if _, ok := labels[k]; ok {
			dropLabels[k] = nil
		}
	}
	if len(dropLabels) > 0 {
		md["labels"] = dropLabels
	}
	dropAnnotations := map[string]any{}
	for _, k := range []string{v1alpha1.AnnotationWork, v1alpha1.AnnotationSourceVersion, v1alpha1.AnnotationKeptForOrphans} {
		if _, ok := annotations[k]; ok {
			dropAnnotations[k] = nil
		}
	}
	if len(dropAnnotations) > 0 {
		md["annotations"] = dropAnnotations
	}
	kept := make([]metav1.ManagedFieldsEntry, 0, len(managed))
	for _, e := range managed {
		if e.Manager != owner {
			kept = append(kept, e)
		}
	}
	if len(kept) < len(managed) {
		if len(kept) == 0 {
			// An empty list leaves managedFields as they are; a list with
			// one empty entry clears them.
			md["managedFields"] = []map[string]any{{}}
		} else {
			md["managedFields"] = kept
		}
	}
	b, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return nil, fmt.Errorf("encoding the release patch: %w", err)
	}
	return b, nil
}
