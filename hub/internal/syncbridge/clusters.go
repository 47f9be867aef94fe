package syncbridge

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/api/equality"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

var (
	_ syncserver.RevocationChecker = Registry{}
	_ syncserver.AdmissionChecker  = Registry{}
)

// Admitted implements AdmissionChecker from the MemberCluster cache (see
// Admission).
func (r Registry) Admitted(ctx context.Context, cluster, memberUID string) (bool, string, error) {
	mc := &flotillav1.MemberCluster{}
	err := r.Reader.Get(ctx, client.ObjectKey{Name: cluster}, mc)
	if apierrors.IsNotFound(err) {
		return true, "", nil
	}
	if err != nil {
		return false, "", err
	}
	ok, why := Admission(mc, memberUID)
	return ok, why, nil
}

// Admission decides whether the agent of mc, presenting a certificate
// that carries memberUID ("" for one without, from flotilla-pki), may be
// served, and when not, why, in words that say what to do. A member that
// is not Accepted is refused (double opt-in, and denial revokes); a
// join-issued certificate is refused by a MemberCluster with another UID:
// the member was deleted and created again, and whoever held the old
// certificate must join again to be let in. A Push member's agent is
// refused too: the hub applies that member's Works itself, and two
// appliers would fight.
func Admission(mc *flotillav1.MemberCluster, memberUID string) (bool, string) {
	if memberUID != "" && memberUID != string(mc.UID) {
		return false, fmt.Sprintf("MemberCluster %s was re-created since this certificate was issued (for UID %s, it is %s now); join it again (kubectl flotilla join)", mc.Name, memberUID, mc.UID)
	}
	switch {
	case mc.IsPush():
		return false, fmt.Sprintf("MemberCluster %s is in Push mode: the hub applies its Works itself, so no agent is served (remove the agent, or set spec.syncMode Pull to use it again)", mc.Name)
	case mc.IsAccepted():
		return true, ""
	case mc.Spec.Acceptance == flotillav1.AcceptanceDenied:
		return false, fmt.Sprintf("MemberCluster %s is Denied on this hub: its agent is not served (kubectl flotilla accept %s lets it back in)", mc.Name, mc.Name)
	default:
		return false, fmt.Sprintf("MemberCluster %s is %s, not Accepted: an admin must accept it first (kubectl flotilla accept %s)", mc.Name, mc.Spec.Acceptance, mc.Name)
	}
}

// Revoked implements RevocationChecker: the MemberCluster's
// spec.revokedCertificates lists fingerprint. The API validates the
// entries as lower-case hex, the form the server computes.
func (r Registry) Revoked(ctx context.Context, cluster, fingerprint string) (bool, error) {
	mc := &flotillav1.MemberCluster{}
	err := r.Reader.Get(ctx, client.ObjectKey{Name: cluster}, mc)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(mc.Spec.RevokedCertificates, fingerprint), nil
}

// WatchClusters calls changed with a MemberCluster's name on every add,
// update and delete the cache's informer sees (the server's
// ClusterChanged), so that deleting a MemberCluster, revoking one of its
// certificates, or making it Pending or Denied, ends its agent's stream
// at once. The informer updates
// its store before it calls handlers, so Registry already answers with
// the change when changed runs.
func WatchClusters(ctx context.Context, c cache.Cache, changed func(cluster string)) error {
	inf, err := c.GetInformer(ctx, &flotillav1.MemberCluster{})
	if err != nil {
		return fmt.Errorf("getting the MemberCluster informer: %w", err)
	}
	name := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if mc, ok := obj.(*flotillav1.MemberCluster); ok {
			changed(mc.Name)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: name,
		UpdateFunc: func(oldObj, newObj any) {
			// Only spec (revocations, acceptance, sync mode) and deletion
			// matter;
			// status writes, which heartbeats cause all the time, do not.
			o, ok1 := oldObj.(*flotillav1.MemberCluster)
			n, ok2 := newObj.(*flotillav1.MemberCluster)
			if ok1 && ok2 && slices.Equal(o.Spec.RevokedCertificates, n.Spec.RevokedCertificates) &&
				o.IsAccepted() == n.IsAccepted() && o.UID == n.UID &&
				o.Spec.SyncMode == n.Spec.SyncMode && equality.Semantic.DeepEqual(o.Spec.Push, n.Spec.Push) {
				return
			}
			name(newObj)
		},
		DeleteFunc: name,
	}); err != nil {
		return fmt.Errorf("watching MemberClusters: %w", err)
	}
	return nil
}
