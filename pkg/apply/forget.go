package apply

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Forget drops Work workName's applied-set record and deletes nothing
// else: the Work vanished from the hub without the hub meaning to delete
// it, so its objects are orphaned. They keep running and keep Flotilla's
// labels and field ownership, but no Delete or Prune can reach them any
// more, since both act only on recorded objects. A Work of the same name
// applied later adopts them again: server-side apply takes the same
// fields, and the record is written anew.
//
// The record's ConfigMap is deleted before the Applier forgets the Work in
// memory, so a Forget that fails leaves the Work held (Applied still lists
// it) and is to be called again. Forget needs no fleet identity and no
// Fence: it deletes nothing the member runs.
func (a *Applier) Forget(ctx context.Context, workName string) error {
	unlock := a.locks.lock(workName)
	defer unlock()
	if err := a.ensureLoaded(ctx); err != nil {
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
		if err := a.writer.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("forgetting Work %s: deleting its applied-set record (ConfigMap %s/%s): %w", workName, a.recordNamespace, cm.GetName(), err)
		}
	}
	a.set.put(&record{work: workName})
	a.tracker.forget(workName)
	return nil
}
