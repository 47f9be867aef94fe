package membercluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// drainRecheck is how often a draining MemberCluster counts its Works
// again. The MyApp controller moves the replicas and deletes the Works;
// this controller only waits for them to be gone.
const drainRecheck = 2 * time.Second

// ensureFinalizer puts the drain finalizer on mc, so that deleting it
// drains it first.
func (r *Reconciler) ensureFinalizer(ctx context.Context, mc *flotillav1.MemberCluster) error {
	if controllerutil.ContainsFinalizer(mc, flotillav1.MemberClusterFinalizer) {
		return nil
	}
	before := mc.DeepCopy()
	controllerutil.AddFinalizer(mc, flotillav1.MemberClusterFinalizer)
	if err := r.Client.Patch(ctx, mc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding the drain finalizer to %s: %w", mc.Name, err)
	}
	return nil
}

// drain holds a deleted MemberCluster until its Works are gone. The
// scheduler evicts a MemberCluster being deleted from every MyApp (reason
// ClusterDeleting); the MyApp controller keeps each Work until the
// replicas that replace it are available elsewhere (or the app's grace
// period ends), renders it with the deletion policy in force (the
// MemberCluster's spec.deletionPolicy, Orphan by default, unless the MyApp
// says Orphan), and deletes it with the deletion intent, so the agent
// deletes or releases the member objects. Meanwhile the Draining
// condition counts the Works left. When none is left, the cluster
// namespace is deleted (it holds nothing) and the finalizer removed.
func (r *Reconciler) drain(ctx context.Context, mc *flotillav1.MemberCluster) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(mc, flotillav1.MemberClusterFinalizer) {
		return reconcile.Result{}, nil
	}
	ns := flotillav1.ClusterNamespace(mc.Name)
	var works flotillav1.WorkList
	if err := r.Client.List(ctx, &works, client.InNamespace(ns)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the Works of draining cluster %s: %w", mc.Name, err)
	}
	if n := len(works.Items); n > 0 {
		policy := mc.Spec.DeletionPolicy
		if policy == "" {
			policy = flotillav1.DefaultMemberClusterDeletionPolicy
		}
		c := metav1.Condition{
			Type: flotillav1.ConditionDraining, Status: metav1.ConditionTrue, Reason: flotillav1.ReasonDraining,
			Message: fmt.Sprintf("%d Works left: each goes once its replicas run on other members (or its MyApp's grace period ends); "+
				"the member's copies are then handled by deletionPolicy %s", n, policy),
			ObservedGeneration: mc.Generation,
		}
		if cur := meta.FindStatusCondition(mc.Status.Conditions, c.Type); cur == nil || cur.Message != c.Message {
			before := mc.DeepCopy()
			meta.SetStatusCondition(&mc.Status.Conditions, c)
			if err := r.Client.Status().Patch(ctx, mc, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("updating the Draining condition of %s: %w", mc.Name, err)
			}
			if cur == nil && r.Recorder != nil {
				r.Recorder.Eventf(mc, nil, corev1.EventTypeNormal, flotillav1.ReasonDraining, "Drain",
					"draining before deletion: %d Works to move; the member's copies are then handled by deletionPolicy %s", n, policy)
			}
		}
		return reconcile.Result{RequeueAfter: drainRecheck}, nil
	}
	err := r.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("deleting the namespace %s of drained cluster %s: %w", ns, mc.Name, err)
	}
	r.namespaces.Delete(ns)
	before := mc.DeepCopy()
	controllerutil.RemoveFinalizer(mc, flotillav1.MemberClusterFinalizer)
	if err := r.Client.Patch(ctx, mc, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing the drain finalizer of %s: %w", mc.Name, err)
	}
	log.FromContext(ctx).Info("drained; the MemberCluster goes", "cluster", mc.Name)
	return reconcile.Result{}, nil
}
