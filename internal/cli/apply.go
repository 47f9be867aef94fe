package cli

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/internal/ssa"
	"github.com/flotilla-dev/flotilla/internal/ssa/ssacr"
)

// applyObjects server-side applies objs in order with the CLI's field
// manager, taking over fields another manager set (the files are the
// truth, as with `kubectl apply --server-side --force-conflicts`).
func applyObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		ac, err := ssacr.ApplyConfiguration(o, ssa.ServerSetMetadata...)
		if err != nil {
			return err
		}
		if err := c.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), objectName(o), err)
		}
	}
	return nil
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
