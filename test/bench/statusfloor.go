// The status floor: one write to the hub's apiserver, issued the moment
// the last member Deployment is ready, so the report can show what a hub
// write costs on this machine at the point the status figure starts from.
// The status path makes two such writes in series (the Work's status, then
// the MyApp's), the propagation floor none on the hub.

package main

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// probeLease is the object the status floor writes: a Lease in the bench
// namespace on the hub, which nothing in Flotilla watches, so the write
// costs the apiserver and its storage, and wakes no controller.
const probeLease = "status-floor"

// createProbe creates the probe's Lease (prepare calls it).
func (b *bench) createProbe(ctx context.Context) error {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: probeLease, Namespace: benchNamespace}}
	if err := b.f.Hub.Create(ctx, l); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the status floor's Lease %s/%s on the hub: %w", benchNamespace, probeLease, err)
	}
	return nil
}

// probeResult is one probe: how long the write took, or why it failed.
type probeResult struct {
	took time.Duration
	err  error
}

// probeHub writes the probe's Lease once (a merge patch of its renew
// time) and sends how long the call took.
func (b *bench) probeHub(ctx context.Context, out chan<- probeResult) {
	now := metav1.NewMicroTime(time.Now())
	patch := fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, now.Format(metav1.RFC3339Micro))
	start := time.Now()
	err := b.f.Hub.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: probeLease, Namespace: benchNamespace}},
		client.RawPatch(types.MergePatchType, patch))
	out <- probeResult{took: time.Since(start), err: err}
}
