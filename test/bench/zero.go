// Scale to zero: one Divided MyApp (static weights 1:...:1,
// replicasPerMember in each member) scaled to 0 and back, timed from each
// update on the hub until the members and the MyApp's status show it. The
// member Deployments must stay the same objects all the way through.

package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// zeroApp is Divided with equal static weights, replicasPerMember in each
// member.
func (b *bench) zeroApp(name string) *flotillav1.MyApp {
	app := b.failoverApp(name)
	app.Spec.Replicas = ptr.To(int32(replicasPerMember * len(b.members)))
	app.Spec.Failover = nil
	return app
}

// zero runs the scale-to-zero figures: run 0 is a warm-up, then
// opts.zeroRuns counted runs of N -> 0 -> N on the same MyApp.
func (b *bench) zero(ctx context.Context) error {
	if err := b.waitQuiet(ctx, "scale to zero"); err != nil {
		return err
	}
	const name = "zero"
	n := int32(len(b.members))
	full := replicasPerMember * n
	wReady := b.obs.expect(b.deploymentsOf(name, readyWith(replicasPerMember)))
	if err := b.f.Hub.Create(ctx, b.zeroApp(name)); err != nil {
		return fmt.Errorf("creating MyApp %s: %w", name, err)
	}
	if _, err := wReady.wait(ctx, b.opts.timeout, "the Deployments of "+name+" ready"); err != nil {
		return err
	}
	uids := map[string]types.UID{}
	b.obs.read(func() {
		for _, m := range b.members {
			uids[m] = b.obs.deploys[m][name].UID
		}
	})

	for i := 0; i <= b.opts.zeroRuns; i++ {
		counted := i > 0
		// N -> 0: the members at 0, and the MyApp Ready as ScaledToZero.
		wDown := b.obs.expect(b.sameDeployments(name, uids, 0))
		wDownApp := b.obs.expect(appReadyAt(name, 0, flotillav1.ReasonScaledToZero))
		t0 := time.Now()
		if err := b.scale(ctx, name, 0); err != nil {
			return err
		}
		tDown, err := wDown.wait(ctx, b.opts.timeout, "the same Deployments of "+name+" at 0 replicas")
		if err != nil {
			return err
		}
		tDownApp, err := wDownApp.wait(ctx, b.opts.timeout, "MyApp "+name+" Ready (ScaledToZero)")
		if err != nil {
			return err
		}

		// 0 -> N: the same Deployments ready again, then the MyApp Ready.
		wUp := b.obs.expect(b.sameDeployments(name, uids, replicasPerMember))
		wUpApp := b.obs.expect(appReadyAt(name, full, flotillav1.ReasonReady))
		t1 := time.Now()
		if err := b.scale(ctx, name, full); err != nil {
			return err
		}
		tUp, err := wUp.wait(ctx, b.opts.timeout, fmt.Sprintf("the same Deployments of %s ready with %d replicas", name, replicasPerMember))
		if err != nil {
			return err
		}
		tUpApp, err := wUpApp.wait(ctx, b.opts.timeout, "MyApp "+name+" Ready")
		if err != nil {
			return err
		}
		progress("run %2d%s: scale to 0 %s (status %s), scale 0 -> %d %s (status %s)",
			i, warmup(counted), ms(tDown.Sub(t0)), ms(tDownApp.Sub(t0)), full, ms(tUp.Sub(t1)), ms(tUpApp.Sub(t1)))
		if counted {
			b.zeroDown.add(tDown.Sub(t0))
			b.zeroDownStatus.add(tDownApp.Sub(t0))
			b.zeroUp.add(tUp.Sub(t1))
			b.zeroUpStatus.add(tUpApp.Sub(t1))
		}
		b.load.sample("scale to zero")
	}
	return b.deleteApp(ctx, name)
}

// sameDeployments is true when every member runs the Deployment name with
// the UID in uids (it was not recreated), ready with replicas.
func (b *bench) sameDeployments(name string, uids map[string]types.UID, replicas int32) func(*observer) bool {
	ready := readyWith(replicas)
	return func(o *observer) bool {
		for _, m := range b.members {
			d := o.deploys[m][name]
			if d == nil || d.UID != uids[m] || !ready(d) {
				return false
			}
		}
		return true
	}
}

// scale sets the replicas of MyApp name.
func (b *bench) scale(ctx context.Context, name string, replicas int32) error {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
	if err := b.f.Hub.Patch(ctx, &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}, patch); err != nil {
		return fmt.Errorf("scaling %s to %d: %w", name, replicas, err)
	}
	return nil
}

// appReadyAt is true when MyApp name's status, for its current generation,
// says Ready with reason and desired replicas all ready.
func appReadyAt(name string, desired int32, reason string) func(*observer) bool {
	return func(o *observer) bool {
		a := o.apps[name]
		if a == nil || a.Spec.Replicas == nil || *a.Spec.Replicas != desired || a.Status.ObservedGeneration != a.Generation {
			return false
		}
		c := meta.FindStatusCondition(a.Status.Conditions, flotillav1.ConditionReady)
		return a.Status.DesiredReplicas == desired && a.Status.ReadyReplicas == desired &&
			c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && c.ObservedGeneration == a.Generation
	}
}
