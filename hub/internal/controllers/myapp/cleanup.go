package myapp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/finalizer"
)

// DefaultWorkCleanupTimeout is how long a deleted Work waits for its
// member to confirm it holds nothing of it (its finalizer
// flotilla.dev/member-cleanup) before the hub gives up, lets the Work go
// and names the member in the MyApp's status.orphans. Long enough for a
// member that restarts or reconnects (its hello confirms at once), short
// enough that a member lost for good holds a MyApp deletion or a cluster
// drain for minutes, not for ever.
const DefaultWorkCleanupTimeout = 10 * time.Minute

// expiredWorks returns the Works of existing being deleted whose member
// has not confirmed within timeout, sorted by namespace, and when the next
// one expires (0: none pending). It is pure.
func expiredWorks(existing map[string]*flotillav1.Work, now time.Time, timeout time.Duration) ([]*flotillav1.Work, time.Duration) {
	var out []*flotillav1.Work
	var next time.Duration
	for _, w := range existing {
		if w.DeletionTimestamp.IsZero() || !slices.Contains(w.Finalizers, flotillav1.WorkFinalizer) {
			continue
		}
		deadline := w.DeletionTimestamp.Add(timeout)
		if now.Before(deadline) {
			next = earliest(next, deadline.Sub(now))
			continue
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out, next
}

// orphansAfter is the MyApp's status.orphans after expired Works are let
// go at now: prev with an entry for each expired Work's cluster, without
// the clusters the app runs in again (their new Work adopts the objects).
// It is pure and returns a new slice.
func orphansAfter(prev []flotillav1.OrphanedWork, expired []*flotillav1.Work, targets []flotillav1.TargetCluster, now time.Time, timeout time.Duration) []flotillav1.OrphanedWork {
	out := make([]flotillav1.OrphanedWork, 0, len(prev)+len(expired))
	for _, o := range prev {
		if !slices.ContainsFunc(targets, func(t flotillav1.TargetCluster) bool { return t.Name == o.Cluster }) {
			out = append(out, o)
		}
	}
	for _, w := range expired {
		cluster := strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix)
		out = slices.DeleteFunc(out, func(o flotillav1.OrphanedWork) bool { return o.Cluster == cluster })
		out = append(out, flotillav1.OrphanedWork{
			Cluster: cluster, Work: w.Name, Since: metav1.NewTime(now).Rfc3339Copy(),
			Message: fmt.Sprintf("the member did not confirm within %s that it deleted or released the Work's objects; they may still run there", timeout),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	if len(out) == 0 {
		return nil
	}
	return out
}

// releaseExpired removes the member-cleanup finalizer of each expired
// Work, so its deletion completes without the member, and says so in an
// event on app (when there is one).
func (r *Reconciler) releaseExpired(ctx context.Context, app *flotillav1.MyApp, expired []*flotillav1.Work) error {
	var errs []error
	for _, w := range expired {
		patch, ok, err := finalizer.RemovePatch(w, flotillav1.WorkFinalizer)
		if err == nil && ok {
			err = r.Client.Patch(ctx, w.DeepCopy(), patch)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("letting Work %s/%s go without its member: %w", w.Namespace, w.Name, err))
			continue
		}
		if r.Recorder != nil && app != nil {
			r.Recorder.Eventf(app, nil, corev1.EventTypeWarning, "MemberCleanupTimeout", "Cleanup",
				"cluster %s did not confirm within %s that it removed the objects of Work %s; the Work is gone from the hub and the objects may still run there (status.orphans)",
				strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix), r.cleanupTimeout(), w.Name)
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) cleanupTimeout() time.Duration {
	if r.WorkCleanupTimeout > 0 {
		return r.WorkCleanupTimeout
	}
	return DefaultWorkCleanupTimeout
}
