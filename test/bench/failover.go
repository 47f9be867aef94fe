// Failover: a Divided MyApp, one member's control plane stopped, timed
// until its replicas are ready in the other members; then the member is
// started again and the failback awaited.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// failoverApp is Divided with equal static weights: 2 replicas per member,
// so that the members left take the lost member's share between them.
func (b *bench) failoverApp(name string) *flotillav1.MyApp {
	var weights []flotillav1.StaticClusterWeight
	for _, m := range b.members {
		weights = append(weights, flotillav1.StaticClusterWeight{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{m}}, Weight: 1})
	}
	return &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: flotillav1.MyAppSpec{
			Image:    imageV1,
			Replicas: ptr.To(int32(2 * len(b.members))),
			Placement: flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
				ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
				ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
				WeightPreference:          &flotillav1.ClusterPreferences{StaticWeightList: weights},
			}},
			Failover: &flotillav1.FailoverPolicy{
				ClusterUnreachable: &flotillav1.ClusterFailover{TolerationSeconds: ptr.To(int32(b.opts.toleration))},
				// Back after a second of readiness, so that runs settle quickly.
				Failback: &flotillav1.FailbackPolicy{Enabled: ptr.To(true), StabilizationWindowSeconds: ptr.To[int32](1)},
			},
		},
	}
}

// workReplicas is the replicas of a Work's Deployment manifest.
func workReplicas(w *flotillav1.Work) int32 {
	if w == nil || len(w.Spec.Manifests) == 0 {
		return -1
	}
	var d struct {
		Spec struct {
			Replicas *int32 `json:"replicas"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(w.Spec.Manifests[0].Raw, &d); err != nil {
		return -1
	}
	return ptr.Deref(d.Spec.Replicas, 1)
}

func hasUnreachableTaint(mc *flotillav1.MemberCluster) bool {
	for _, t := range mc.Spec.Taints {
		if t.Key == flotillav1.TaintClusterUnreachable {
			return true
		}
	}
	return false
}

// failover creates the Divided MyApp and runs the failover figure: run 0
// is a warm-up, then opts.failoverRuns counted runs.
func (b *bench) failover(ctx context.Context) error {
	const name = "failover"
	if err := b.waitQuiet(ctx, "failover"); err != nil {
		return err
	}
	if err := b.f.Hub.Create(ctx, b.failoverApp(name)); err != nil {
		return fmt.Errorf("creating MyApp %s: %w", name, err)
	}
	if _, err := b.settled(ctx, name, b.opts.timeout); err != nil {
		return err
	}
	for i := 0; i <= b.opts.failoverRuns; i++ {
		// A member whose testbed process died since the last run
		// settled is restarted first, and the app settles again.
		if restarted, err := b.restartDead(ctx); err != nil {
			return err
		} else if restarted {
			if _, err := b.settled(ctx, name, 3*b.opts.timeout); err != nil {
				return err
			}
		}
		if err := b.failoverRun(ctx, name, i, i > 0); err != nil {
			return fmt.Errorf("failover run %d: %w%s", i, err, b.deadSummary())
		}
		b.load.sample("failover")
	}
	return b.deleteApp(ctx, name)
}

func (b *bench) failoverRun(ctx context.Context, name string, i int, counted bool) error {
	victim := b.victim()
	workName := flotillav1.WorkName(benchNamespace, name)
	total := int32(2 * len(b.members))
	var survivors []string
	for _, m := range b.members {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	cond := func(typ string) func(o *observer) bool {
		return func(o *observer) bool {
			mc := o.clusters[victim]
			return mc != nil && !meta.IsStatusConditionTrue(mc.Status.Conditions, typ)
		}
	}
	wDisconnected := b.obs.expect(cond(flotillav1.ConditionConnected))
	wNotReady := b.obs.expect(cond(flotillav1.ConditionReady))
	wTaint := b.obs.expect(func(o *observer) bool {
		mc := o.clusters[victim]
		return mc != nil && hasUnreachableTaint(mc)
	})
	wWorks := b.obs.expect(func(o *observer) bool {
		var sum int32
		for _, m := range survivors {
			sum += max(workReplicas(o.works[m][workName]), 0)
		}
		return sum == total
	})
	wDone := b.obs.expect(func(o *observer) bool {
		var sum int32
		for _, m := range survivors {
			d := o.deploys[m][name]
			if d == nil || !readyWith(ptr.Deref(d.Spec.Replicas, 1))(d) {
				return false
			}
			sum += ptr.Deref(d.Spec.Replicas, 1)
		}
		return sum == total
	})

	// The victim's informer goes first, or its reflector would back off
	// against a dead apiserver and miss the restart for a while.
	b.obs.stopMember(victim)
	t0 := time.Now()
	if err := b.f.StopMember(victim); err != nil {
		progress("warning: stopping %s: %v", victim, err)
	}
	tStopped := time.Now()
	tDisc, err := wDisconnected.wait(ctx, b.opts.timeout, victim+" Connected=False")
	if err != nil {
		return err
	}
	tNotReady, err := wNotReady.wait(ctx, b.opts.timeout, victim+" Ready=False")
	if err != nil {
		return err
	}
	tTaint, err := wTaint.wait(ctx, b.opts.timeout, victim+"'s unreachable taint")
	if err != nil {
		return err
	}
	tWorks, err := wWorks.wait(ctx, b.opts.timeout, "the survivors' Works updated")
	if err != nil {
		return err
	}
	tDone, err := wDone.wait(ctx, b.opts.timeout, "the survivors' replicas ready")
	if err != nil {
		return err
	}
	raw := tDone.Sub(t0)
	configured := b.opts.grace + time.Duration(b.opts.toleration)*time.Second

	// Failback.
	tStart := time.Now()
	if err := b.f.StartMember(ctx, victim); err != nil {
		return fmt.Errorf("starting %s again: %w", victim, err)
	}
	if err := b.watchMember(ctx, victim); err != nil {
		return err
	}
	restarted, err := b.settled(ctx, name, 3*b.opts.timeout)
	if err != nil {
		return err
	}
	tSettled := time.Now()
	progress("failover run %2d%s: %s (minus %s: %s); stop call %s; disconnected %s, taint +%s, works +%s, ready +%s; failback %s",
		i, warmup(counted), ms(raw), configured, ms(raw-configured), ms(tStopped.Sub(t0)), ms(tDisc.Sub(t0)),
		ms(tTaint.Sub(tDisc)), ms(tWorks.Sub(tTaint)), ms(tDone.Sub(tWorks)), ms(tSettled.Sub(tStart)))
	if counted {
		b.failRaw.add(raw)
		b.failNet.add(raw - configured)
		b.fStopCall.add(tStopped.Sub(t0))
		b.fDisconnected.add(tDisc.Sub(t0))
		b.fTaint.add(tTaint.Sub(tDisc))
		b.fNotReady.add(tNotReady.Sub(tTaint))
		b.fWorks.add(tWorks.Sub(tTaint))
		b.fReady.add(tDone.Sub(tWorks))
		if !restarted {
			b.fFailback.add(tSettled.Sub(tStart))
		}
	}
	return nil
}

// settled waits (polling the apiservers) until the failover MyApp runs 2
// replicas ready in every member, the hub says so, and every member is
// Ready without the unreachable taint.
//
// A member whose control-plane process died (kwok v0.8.0 can crash at
// start with a concurrent map access, and the testbed does not restart
// it) is restarted, and restarted says so: that run's failback time is not
// counted.
func (b *bench) settled(ctx context.Context, name string, timeout time.Duration) (restarted bool, err error) {
	total := int32(2 * len(b.members))
	err = poll(ctx, timeout, "the failover MyApp to settle on every member", func() (string, error) {
		r, err := b.restartDead(ctx)
		if err != nil {
			return "", err
		}
		if r {
			restarted = true
			return "a member was restarted", nil
		}
		var mcs flotillav1.MemberClusterList
		if err := b.f.Hub.List(ctx, &mcs); err != nil {
			return "", err
		}
		for i := range mcs.Items {
			c := mcs.Items[i].Status.Conditions
			if !meta.IsStatusConditionTrue(c, flotillav1.ConditionReady) || !meta.IsStatusConditionTrue(c, flotillav1.ConditionConnected) || hasUnreachableTaint(&mcs.Items[i]) {
				return mcs.Items[i].Name + " is not Ready and Connected, or still tainted", nil
			}
		}
		app := &flotillav1.MyApp{}
		if err := b.f.Hub.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: name}, app); err != nil {
			return "", err
		}
		if app.Status.ObservedGeneration != app.Generation || app.Status.DesiredReplicas != total || app.Status.ReadyReplicas != total ||
			!meta.IsStatusConditionTrue(app.Status.Conditions, flotillav1.ConditionReady) || app.Status.Placement == nil ||
			len(app.Status.Placement.Clusters) != len(b.members) {
			return fmt.Sprintf("the MyApp is not Ready on every member (desired %d, ready %d)", app.Status.DesiredReplicas, app.Status.ReadyReplicas), nil
		}
		for _, m := range b.members {
			d := &appsv1.Deployment{}
			if err := b.f.Member(m).Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: name}, d); err != nil {
				// Not there yet, or a member just started still refuses.
				return fmt.Sprintf("the Deployment in %s: %v", m, err), nil
			}
			if !readyWith(2)(d) {
				return fmt.Sprintf("the Deployment in %s has %d/%d ready", m, d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 1)), nil
			}
		}
		return "", nil
	})
	return restarted, err
}
