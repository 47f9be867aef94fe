package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// released fails unless d runs (not being deleted) with UID uid and
// carries none of Flotilla's labels: the agent handed it back to the
// member.
func released(d *appsv1.Deployment, uid types.UID) error {
	if d.UID != uid || d.DeletionTimestamp != nil {
		return fmt.Errorf("deleted or replaced (uid %s, was %s)", d.UID, uid)
	}
	for _, k := range []string{flotillav1.LabelWork, flotillav1.LabelFleet, flotillav1.LabelCluster} {
		if v, ok := d.Labels[k]; ok {
			return fmt.Errorf("still labelled %s=%s", k, v)
		}
	}
	return nil
}

// TestMemberClusterDeletionDrains deletes MemberClusters of a running
// fleet. Deleting member-1 (deletionPolicy Delete) moves the Divided app's
// replicas to member-2 and member-3, and its Deployment in member-1 goes
// only after they are available there; the app with deletionPolicy Orphan
// keeps running in member-1, released. Deleting member-3 (the default
// Orphan policy) moves its replicas to member-2 and leaves member-3's
// Deployment running, released, with the same UID. Each MemberCluster is
// gone once drained.
func TestMemberClusterDeletionDrains(t *testing.T) {
	f := startFleet(t, 3)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	for _, m := range []string{"member-1", "member-2", "member-3"} {
		startAgent(t, f.agentOptions(t, m, syncAddr))
	}
	waitReady(t, f.hub, "member-1", "member-2", "member-3")

	mc1 := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-1"}}
	if err := f.hub.Patch(ctx, mc1, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"deletionPolicy":"Delete"}}`))); err != nil {
		t.Fatal(err)
	}

	web := newApp("web", 3, divided12(map[string]int64{"member-1": 1, "member-2": 1, "member-3": 1}))
	web.Spec.Image = "nginx:1.27"
	keep := newApp("keep", 1, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}})
	keep.Spec.Image = "nginx:1.27"
	keep.Spec.DeletionPolicy = flotillav1.DeletionPolicyOrphan
	for _, app := range []*flotillav1.MyApp{web, keep} {
		if err := f.hub.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
	}
	uid := map[string]types.UID{}
	eventually(t, "web and keep available in their members", 90*time.Second, func() error {
		for _, x := range []struct{ member, name string }{{"member-1", "web"}, {"member-2", "web"}, {"member-3", "web"}, {"member-1", "keep"}, {"member-2", "keep"}} {
			d, err := f.deployment(ctx, x.member, "default", x.name)
			if err != nil {
				return fmt.Errorf("%s in %s: %w", x.name, x.member, err)
			}
			if d.Status.AvailableReplicas != 1 {
				return fmt.Errorf("%s in %s: %d available", x.name, x.member, d.Status.AvailableReplicas)
			}
			uid[x.member+"/"+x.name] = d.UID
		}
		return nil
	})
	available := func(members ...string) int32 {
		n := int32(0)
		for _, m := range members {
			if d, err := f.deployment(ctx, m, "default", "web"); err == nil {
				n += d.Status.AvailableReplicas
			}
		}
		return n
	}

	// Delete member-1: it drains, then goes.
	if err := f.hub.Delete(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-1"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "member-1 Draining", 30*time.Second, func() error {
		mc := &flotillav1.MemberCluster{}
		err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, mc)
		if apierrors.IsNotFound(err) {
			return nil // drained already
		}
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionDraining); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("no Draining condition: %v", mc.Status.Conditions)
		}
		return nil
	})
	eventually(t, "web's Deployment in member-1 deleted, after its replicas ran in member-2 and member-3", 120*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err == nil && d.DeletionTimestamp == nil {
			return fmt.Errorf("still running (uid %s)", d.UID)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		// Gone: the replacements must be there already. Availability does
		// not regress here, so reading it now cannot pass a deletion that
		// came first.
		if n := available("member-2", "member-3"); n < 3 {
			t.Fatalf("member-1's Deployment was deleted while only %d of 3 replicas were available elsewhere", n)
		}
		return nil
	})
	eventually(t, "MemberCluster member-1 gone after its drain", 60*time.Second, func() error {
		err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, &flotillav1.MemberCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	// The Orphan MyApp wins over the cluster's Delete: keep runs on.
	d, err := f.deployment(ctx, "member-1", "default", "keep")
	if err != nil {
		t.Fatalf("keep's Deployment in member-1 (MyApp deletionPolicy Orphan): %v", err)
	}
	if err := released(d, uid["member-1/keep"]); err != nil {
		t.Fatalf("keep's Deployment in member-1: %v", err)
	}

	// Delete member-3 with the default policy, Orphan.
	if err := f.hub.Delete(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-3"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "MemberCluster member-3 drained and gone, web all on member-2", 120*time.Second, func() error {
		err := f.hub.Get(ctx, client.ObjectKey{Name: "member-3"}, &flotillav1.MemberCluster{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("member-3 still there (%v)", err)
		}
		if n := available("member-2"); n != 3 {
			return fmt.Errorf("%d of 3 replicas available in member-2", n)
		}
		return nil
	})
	consistently(t, "member-3's web Deployment running, released, same UID", 5*time.Second, func() error {
		d, err := f.deployment(ctx, "member-3", "default", "web")
		if err != nil {
			return err
		}
		return released(d, uid["member-3/web"])
	})
	// The remaining member still runs its copies, managed.
	d, err = f.deployment(ctx, "member-2", "default", "web")
	if err != nil || d.UID != uid["member-2/web"] || d.Labels[flotillav1.LabelWork] == "" {
		t.Fatalf("member-2's web Deployment changed: %v (err %v)", d, err)
	}
}
