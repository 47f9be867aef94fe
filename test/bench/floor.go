// The floor: the same Deployments created directly in the members, timed
// the same way in the same runs, so the report can show what Flotilla adds.

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
)

// directDeployment is the floor's Deployment: what the hub renders for a
// MyApp of the same name, with labels of its own so no agent takes it for
// one of its Works' objects.
func directDeployment(name string) *appsv1.Deployment {
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}, Spec: flotillav1.MyAppSpec{Image: imageV1}}
	d, err := render.Deployment(app, replicasPerMember, render.ClusterOverrides{})
	if err != nil {
		panic(fmt.Sprintf("rendering the floor's Deployment: %v", err))
	}
	sel := map[string]string{"bench.flotilla.dev/direct": name}
	d.Labels = map[string]string{"app.kubernetes.io/name": name, "bench.flotilla.dev/direct": name}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	d.Spec.Template.Labels = sel
	return d
}

// directRun creates the same Deployments directly in the members, one
// goroutine per member, and times them the same way.
func (b *bench) directRun(ctx context.Context, i int, counted bool) error {
	name := fmt.Sprintf("direct-%03d", i)
	wExist := b.obs.expect(b.deploymentsOf(name, nil))
	wReady := b.obs.expect(b.deploymentsOf(name, readyWith(replicasPerMember)))
	errs := make([]error, len(b.members))
	var wg sync.WaitGroup
	t0 := time.Now()
	for j, m := range b.members {
		wg.Go(func() { errs[j] = b.f.Member(m).Create(ctx, directDeployment(name)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("creating Deployment %s directly: %w", name, err)
	}
	tExist, err := wExist.wait(ctx, b.opts.timeout, "the direct Deployments")
	if err != nil {
		return err
	}
	tReady, err := wReady.wait(ctx, b.opts.timeout, "the direct Deployments ready")
	if err != nil {
		return err
	}
	progress("run %2d%s: floor %s, to ready %s", i, warmup(counted), ms(tExist.Sub(t0)), ms(tReady.Sub(t0)))
	if counted {
		b.direct.add(tExist.Sub(t0))
		b.directReady.add(tReady.Sub(t0))
	}
	for _, m := range b.members {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}
		if err := b.f.Member(m).Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return poll(ctx, b.opts.timeout, "Deployment "+name+" and its pods to go", func() (string, error) {
		return b.goneFromMembers(ctx, name, client.MatchingLabels{"bench.flotilla.dev/direct": name})
	})
}
