//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Specs of push mode (MemberCluster spec.syncMode Push): switching a
// member between the modes keeps what runs, and a bad kubeconfig Secret
// fails only its own member.

// SyncModeSwitchSpec: a MyApp Duplicated to every member; the member
// switched is the first Push member (the last member in an all-pull
// fleet). It is switched to the other mode and back, ending in the mode
// it had (Push -> Pull -> Push on the default testbed fleet). After each
// switch: the MemberCluster is Ready again (in Pull through one of its
// agents; in Push with no agent running), its Work of the MyApp is Applied
// for its generation, its Deployment is the same object (same UID), and
// the MyApp stayed Ready throughout; then a scale reaches every member
// through the new mode, on the same Deployments.
func SyncModeSwitchSpec(t *testing.T, in SpecInput) {
	sw, ok := in.Provider.(SyncModeSwitcher)
	if !ok {
		t.Skipf("the %s provider cannot switch a member's sync mode", in.Provider.Name())
	}
	ctx := context.Background()
	member := pushMemberOr(in, in.Members[len(in.Members)-1])
	start := in.Provider.SyncMode(member)
	other := flotillav1.SyncModePush
	if start == flotillav1.SyncModePush {
		other = flotillav1.SyncModePull
	}
	// Whatever happens, the member ends in the mode it had.
	t.Cleanup(func() {
		if in.Provider.SyncMode(member) != start {
			if err := sw.SetSyncMode(ctx, member, start); err != nil {
				t.Errorf("switching %s back to %s: %v", member, start, err)
				return
			}
			if err := poll(ctx, convergeTimeout, func() error { return memberReady(ctx, in, member) }); err != nil {
				t.Errorf("%s not Ready after switching it back to %s: %v", member, start, err)
			}
		}
	})

	replicas := int32(2)
	createMyApp(t, in, newMyApp(in, "web", replicas, duplicated()))
	eventually(t, "Deployment web with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, replicas))))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", each(in.Members, replicas)))
	before, err := deploymentIDs(ctx, in, "web", member)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (syncMode %s) runs Deployment web %s", member, start, before[member])

	for _, mode := range []flotillav1.SyncMode{other, start} {
		watch := watchAppReady(t, in, "web")
		switched := time.Now()
		if err := sw.SetSyncMode(ctx, member, mode); err != nil {
			t.Fatalf("switching %s to %s: %v", member, mode, err)
		}
		eventually(t, member+" Ready in "+string(mode)+" mode", convergeTimeout, func() error {
			if err := memberReady(ctx, in, member); err != nil {
				return err
			}
			return syncedBy(ctx, in, member, mode)
		})
		eventually(t, member+"'s Work of web Applied for its generation", convergeTimeout, workApplied(in, "web", member))
		eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", each(in.Members, replicas)))
		if lapses := watch.stop(); len(lapses) > 0 {
			t.Errorf("MyApp web was not Ready while %s switched to %s:\n%s", member, mode, strings.Join(lapses, "\n"))
		}
		now, err := deploymentIDs(ctx, in, "web", member)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameUIDs(before, now, false); err != nil {
			t.Fatalf("switching %s to %s recreated its Deployment: %v", member, mode, err)
		}
		t.Logf("%s Ready in %s mode with its Work Applied %s after the switch", member, mode, time.Since(switched).Round(100*time.Millisecond))

		// The new mode carries a change.
		replicas++
		updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To(replicas) })
		eventually(t, fmt.Sprintf("the scale to %d reaching every member (%s in %s mode)", replicas, member, mode), convergeTimeout,
			deploymentsRolledOut(in, "web", want(each(in.Members, replicas))))
		eventually(t, fmt.Sprintf("MyApp web Ready with %d per member", replicas), convergeTimeout, appReady(in, "web", each(in.Members, replicas)))
		now, err = deploymentIDs(ctx, in, "web", member)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameUIDs(before, now, false); err != nil {
			t.Fatalf("scaling after the switch to %s recreated %s's Deployment: %v", mode, member, err)
		}
	}
}

// syncedBy checks who serves member as mode says: in Pull one of its
// agent replicas holds the stream (Connected, status.agent.instance); in
// Push no agent runs.
func syncedBy(ctx context.Context, in SpecInput, member string, mode flotillav1.SyncMode) error {
	mc := &flotillav1.MemberCluster{}
	if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: member}, mc); err != nil {
		return err
	}
	if mc.Spec.SyncMode != mode {
		return fmt.Errorf("MemberCluster %s spec.syncMode %q, want %s", member, mc.Spec.SyncMode, mode)
	}
	replicas, err := in.Provider.AgentReplicas(ctx, member)
	if err != nil {
		return err
	}
	if mode == flotillav1.SyncModePush {
		if len(replicas) > 0 {
			return fmt.Errorf("%s runs agents %v in Push mode", member, replicas)
		}
		return nil
	}
	if mc.Status.Agent == nil || !slices.Contains(replicas, mc.Status.Agent.Instance) {
		return fmt.Errorf("MemberCluster %s status.agent %+v, want one of its agents %v", member, mc.Status.Agent, replicas)
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionConnected); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("MemberCluster %s Connected %s", member, conditionString(c))
	}
	return nil
}

// workApplied checks that cluster's Work of the MyApp name reports its
// current generation Applied.
func workApplied(in SpecInput, name, cluster string) func() error {
	return func() error {
		works, err := worksOf(context.Background(), in, name)
		if err != nil {
			return err
		}
		w, ok := works[cluster]
		if !ok {
			return fmt.Errorf("no Work of %s for %s", name, cluster)
		}
		c := meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionApplied)
		if w.Status.ObservedGeneration != w.Generation || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Work %s/%s generation %d, status.observedGeneration %d, Applied %s", w.Namespace, w.Name, w.Generation, w.Status.ObservedGeneration, conditionString(c))
		}
		return nil
	}
}

// appReadyWatch samples a MyApp's Ready condition every pollInterval and
// records each sample where it was not True.
type appReadyWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	lapses []string
}

func watchAppReady(t *testing.T, in SpecInput, name string) *appReadyWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &appReadyWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			app, err := getMyApp(ctx, in, name)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				if c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
					w.mu.Lock()
					w.lapses = append(w.lapses, time.Now().UTC().Format("15:04:05.000")+" Ready "+conditionString(c))
					w.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// stop ends the sampling and returns the lapses seen.
func (w *appReadyWatch) stop() []string {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lapses)
}

// BadKubeconfigSpec: an extra MemberCluster push-bad in Push mode whose
// kubeconfig Secret holds garbage turns Ready False with reason
// KubeconfigInvalid and a message naming the Secret
// (flotilla-system/<name>) and its key; pointed at a Secret that does not
// exist, it says so naming that one. Meanwhile every member stays Ready
// and untainted and a MyApp on them keeps running (same Deployments, same
// generations, Ready). push-bad and its Secret are removed at the end.
func BadKubeconfigSpec(t *testing.T, in SpecInput) {
	ctx := context.Background()
	hub := in.Provider.Hub()
	const name = "push-bad"
	garbage := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "flotilla-push-bad"},
		Data:       map[string][]byte{flotillav1.DefaultKubeconfigKey: []byte("this: is [not a kubeconfig\n\x00\x01")},
	}
	const missing = "flotilla-push-bad-missing"

	app := newMyApp(in, "web", 2, duplicated())
	// Only the fleet's members: push-bad is not one to place on.
	app.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: in.Members}
	createMyApp(t, in, app)
	w := each(in.Members, 2)
	eventually(t, "Deployment web with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", w))
	deps, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	health := recordMemberHealth(t, in)

	t.Cleanup(func() {
		mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := client.IgnoreNotFound(hub.Delete(ctx, mc)); err != nil {
			t.Errorf("deleting MemberCluster %s: %v", name, err)
		}
		if err := poll(ctx, convergeTimeout, func() error {
			err := hub.Get(ctx, client.ObjectKey{Name: name}, &flotillav1.MemberCluster{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil {
				return errors.New("MemberCluster " + name + " still there")
			}
			return err
		}); err != nil {
			t.Errorf("MemberCluster %s not gone: %v", name, err)
		}
		if err := client.IgnoreNotFound(hub.Delete(ctx, garbage.DeepCopy())); err != nil {
			t.Errorf("deleting Secret %s/%s: %v", garbage.Namespace, garbage.Name, err)
		}
	})
	if err := hub.Create(ctx, garbage); err != nil {
		t.Fatalf("creating Secret %s/%s: %v", garbage.Namespace, garbage.Name, err)
	}
	mc := &flotillav1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flotillav1.MemberClusterSpec{
			SyncMode: flotillav1.SyncModePush,
			Push:     &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: garbage.Name, Key: flotillav1.DefaultKubeconfigKey}},
		},
	}
	if err := retryWrite(ctx, func() error { return hub.Create(ctx, mc) }); err != nil {
		t.Fatalf("creating MemberCluster %s: %v", name, err)
	}
	eventually(t, name+" Ready False (KubeconfigInvalid) naming "+systemNamespace+"/"+garbage.Name, convergeTimeout,
		kubeconfigInvalid(in, name, garbage.Name, flotillav1.DefaultKubeconfigKey))

	// The second case: the Secret named does not exist.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"push":{"kubeconfigSecretRef":{"name":"`+missing+`"}}}}`))
	if err := retryWrite(ctx, func() error { return hub.Patch(ctx, mc, patch) }); err != nil {
		t.Fatalf("pointing %s at the missing Secret %s: %v", name, missing, err)
	}
	eventually(t, name+" Ready False (KubeconfigInvalid) naming the missing "+systemNamespace+"/"+missing, convergeTimeout,
		kubeconfigInvalid(in, name, missing, flotillav1.DefaultKubeconfigKey))

	// No one else noticed.
	consistently(t, "every member Ready and MyApp web Ready", 5*time.Second, func() error {
		if err := membersReady(ctx, in); err != nil {
			return err
		}
		return appReady(in, "web", w)()
	})
	now, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(deps, now, true); err != nil {
		t.Errorf("member Deployments changed while %s failed: %v", name, err)
	}
	var others []string
	for _, line := range health.stop() {
		if !strings.Contains(line, " "+name+": ") {
			others = append(others, line)
		}
	}
	if len(others) > 0 {
		t.Errorf("members not Ready or tainted while %s's kubeconfig was bad:\n%s", name, strings.Join(others, "\n"))
	}
}

// kubeconfigInvalid checks that the MemberCluster name is Ready False
// with reason KubeconfigInvalid and a message naming the Secret
// flotilla-system/<secret> and key.
func kubeconfigInvalid(in SpecInput, name, secret, key string) func() error {
	return func() error {
		mc := &flotillav1.MemberCluster{}
		if err := in.Provider.Hub().Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != flotillav1.ReasonKubeconfigInvalid {
			return fmt.Errorf("Ready %s, want False with reason %s", conditionString(c), flotillav1.ReasonKubeconfigInvalid)
		}
		if !strings.Contains(c.Message, systemNamespace+"/"+secret) || !strings.Contains(c.Message, key) {
			return fmt.Errorf("Ready message %q does not name Secret %s/%s and key %s", c.Message, systemNamespace, secret, key)
		}
		return nil
	}
}
