package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

// workState reads Work name of cluster: gone, or its deletion state.
func (f *fleet) workState(ctx context.Context, cluster, name string) (gone, terminating bool, err error) {
	w := &flotillav1.Work{}
	err = f.hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}, w)
	if apierrors.IsNotFound(err) {
		return true, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return false, !w.DeletionTimestamp.IsZero() && slices.Contains(w.Finalizers, flotillav1.WorkFinalizer), nil
}

// TestMyAppDeletionWaitsForTheMember deletes a MyApp while its member's
// agent is down: the MyApp and its Work stay (the Work held by its
// member-cleanup finalizer) and the member's Deployment keeps running,
// because nobody has removed it; once the agent is back it deletes the
// Deployment, confirms, and the Work and then the MyApp go. MyApp
// deletion no longer claims a cleanup it has not seen.
func TestMyAppDeletionWaitsForTheMember(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	stopAgent := startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1")

	app, uid := f.createWeb(t)
	workName := flotillav1.WorkName("default", "web")

	stopAgent()
	if err := f.hub.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Work terminating, held by its finalizer", 30*time.Second, func() error {
		gone, terminating, err := f.workState(ctx, "member-1", workName)
		if err != nil || gone || !terminating {
			return fmt.Errorf("gone %v, terminating %v, err %v", gone, terminating, err)
		}
		return nil
	})
	consistently(t, "MyApp, Work and Deployment all still there while the member cannot confirm", 5*time.Second, func() error {
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{}); err != nil {
			return fmt.Errorf("MyApp: %w", err)
		}
		if gone, terminating, err := f.workState(ctx, "member-1", workName); err != nil || gone || !terminating {
			return fmt.Errorf("Work: gone %v, terminating %v, err %v", gone, terminating, err)
		}
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil || d.UID != uid || d.DeletionTimestamp != nil {
			return fmt.Errorf("Deployment changed: %v", err)
		}
		return nil
	})

	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	eventually(t, "the member's Deployment deleted, then the Work and the MyApp gone", 60*time.Second, func() error {
		if d, err := f.deployment(ctx, "member-1", "default", "web"); err == nil && d.DeletionTimestamp == nil {
			return fmt.Errorf("Deployment still running")
		}
		if gone, _, err := f.workState(ctx, "member-1", workName); err != nil || !gone {
			return fmt.Errorf("Work still there (err %v)", err)
		}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("MyApp still there (%v)", err)
		}
		return nil
	})
}

// TestUnconfirmedDeletionTimesOut deschedules a member whose agent is
// down, with a short --work-cleanup-timeout: after it the Work goes
// without the member's confirmation and the MyApp's status.orphans names
// the member, whose Deployment still runs (nobody deleted it); the agent,
// back later, prunes it (the hub no longer wants it).
func TestUnconfirmedDeletionTimesOut(t *testing.T) {
	f := startFleet(t, 2)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHubWith(t, syncAddr, func(o *setup.Options) { o.WorkCleanupTimeout = 4 * time.Second })
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	stop2 := startAgent(t, f.agentOptions(t, "member-2", syncAddr))
	waitReady(t, f.hub, "member-1", "member-2")

	app := newApp("web", 1, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Deployment web in both members", 60*time.Second, func() error {
		for _, m := range []string{"member-1", "member-2"} {
			if _, err := f.deployment(ctx, m, "default", "web"); err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
		}
		return nil
	})

	stop2()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return err
		}
		app.Spec.Placement.ClusterAffinity.ClusterNames = []string{"member-1"}
		return f.hub.Update(ctx, app)
	}); err != nil {
		t.Fatal(err)
	}
	workName := flotillav1.WorkName("default", "web")
	eventually(t, "member-2's Work gone after the cleanup timeout, status.orphans naming member-2", 60*time.Second, func() error {
		if gone, _, err := f.workState(ctx, "member-2", workName); err != nil || !gone {
			return fmt.Errorf("Work still there (err %v)", err)
		}
		got := &flotillav1.MyApp{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		if len(got.Status.Orphans) != 1 || got.Status.Orphans[0].Cluster != "member-2" || got.Status.Orphans[0].Work != workName {
			return fmt.Errorf("status.orphans = %+v", got.Status.Orphans)
		}
		return nil
	})
	if d, err := f.deployment(ctx, "member-2", "default", "web"); err != nil || d.DeletionTimestamp != nil {
		t.Fatalf("member-2's Deployment should still run, unconfirmed and not deleted by anyone: %v", err)
	}
	if _, err := f.deployment(ctx, "member-1", "default", "web"); err != nil {
		t.Fatalf("member-1's Deployment: %v", err)
	}

	startAgent(t, f.agentOptions(t, "member-2", syncAddr))
	eventually(t, "member-2's agent, back, prunes the Deployment the hub no longer wants", 60*time.Second, func() error {
		if d, err := f.deployment(ctx, "member-2", "default", "web"); err == nil && d.DeletionTimestamp == nil {
			return fmt.Errorf("still running")
		}
		return nil
	})
}

// TestAgentRestartedDuringDeletionsConfirmsOnlyWhatItPruned deletes six
// of eight MyApps while their member's agent is down. The agent comes
// back as a new process, which has applied nothing yet, and its snapshot's
// prune would delete six of the eight Deployments, which the deletion
// brake holds. Its hello still names every Work its applied set records,
// so the hub does not take the six as done: their Works stay terminating
// and the MyApps stay while the Deployments run, and the MemberCluster
// says the prune waits. Once an admin confirms it, the six Deployments
// go, then their Works and MyApps; the two kept apps' Deployments are the
// same objects throughout.
func TestAgentRestartedDuringDeletionsConfirmsOnlyWhatItPruned(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	stopAgent := startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1")

	const apps, deleted = 8, 6
	var all []*flotillav1.MyApp
	for i := range apps {
		app := newApp(fmt.Sprintf("web-%d", i), 1, flotillav1.Placement{})
		if err := f.hub.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
		all = append(all, app)
	}
	uids := map[string]types.UID{}
	eventually(t, "a Deployment for each of the 8 MyApps in member-1", 90*time.Second, func() error {
		for _, app := range all {
			d, err := f.deployment(ctx, "member-1", "default", app.Name)
			if err != nil {
				return fmt.Errorf("%s: %w", app.Name, err)
			}
			uids[app.Name] = d.UID
		}
		return nil
	})

	stopAgent()
	gone, kept := all[:deleted], all[deleted:]
	for _, app := range gone {
		if err := f.hub.Delete(ctx, app); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the 6 deleted apps' Works terminating", 30*time.Second, func() error {
		for _, app := range gone {
			if g, terminating, err := f.workState(ctx, "member-1", flotillav1.WorkName("default", app.Name)); err != nil || g || !terminating {
				return fmt.Errorf("%s: gone %v, terminating %v, err %v", app.Name, g, terminating, err)
			}
		}
		return nil
	})

	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	var blocked *metav1.Condition
	eventually(t, "MemberCluster member-1 saying PruneBlocked", 60*time.Second, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, mc); err != nil {
			return err
		}
		blocked = meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionPruneBlocked)
		if blocked == nil || blocked.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", blocked)
		}
		return nil
	})
	nothingDone := func() error {
		for _, app := range all {
			d, err := f.deployment(ctx, "member-1", "default", app.Name)
			if err != nil || d.UID != uids[app.Name] || d.DeletionTimestamp != nil {
				return fmt.Errorf("%s's Deployment changed (err %v)", app.Name, err)
			}
		}
		for _, app := range gone {
			if g, terminating, err := f.workState(ctx, "member-1", flotillav1.WorkName("default", app.Name)); err != nil || g || !terminating {
				return fmt.Errorf("%s's Work confirmed while its Deployment runs: gone %v, terminating %v, err %v", app.Name, g, terminating, err)
			}
			if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{}); err != nil {
				return fmt.Errorf("MyApp %s: %w", app.Name, err)
			}
		}
		return nil
	}
	if err := nothingDone(); err != nil {
		t.Fatalf("once the prune was held: %v", err)
	}
	consistently(t, "the held prune's Deployments running, their Works terminating and MyApps there", 3*time.Second, nothingDone)

	epoch := regexp.MustCompile(regexp.QuoteMeta(flotillav1.AnnotationConfirmPrune) + `=(\d+)`).FindStringSubmatch(blocked.Message)
	if epoch == nil {
		t.Fatalf("PruneBlocked names no epoch to confirm: %q", blocked.Message)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, mc); err != nil {
			return err
		}
		if mc.Annotations == nil {
			mc.Annotations = map[string]string{}
		}
		mc.Annotations[flotillav1.AnnotationConfirmPrune] = epoch[1]
		return f.hub.Update(ctx, mc)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the 6 Deployments deleted, then their Works and MyApps gone", 60*time.Second, func() error {
		for _, app := range gone {
			if d, err := f.deployment(ctx, "member-1", "default", app.Name); err == nil && d.DeletionTimestamp == nil {
				return fmt.Errorf("%s's Deployment still running", app.Name)
			}
			if g, _, err := f.workState(ctx, "member-1", flotillav1.WorkName("default", app.Name)); err != nil || !g {
				return fmt.Errorf("%s's Work still there (err %v)", app.Name, err)
			}
			if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("MyApp %s still there (%v)", app.Name, err)
			}
		}
		return nil
	})
	for _, app := range kept {
		d, err := f.deployment(ctx, "member-1", "default", app.Name)
		if err != nil || d.UID != uids[app.Name] || d.DeletionTimestamp != nil {
			t.Errorf("kept app %s's Deployment: %v (uid %s, want %s)", app.Name, err, d.UID, uids[app.Name])
		}
	}
}
