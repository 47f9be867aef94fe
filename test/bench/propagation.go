// Propagation: a Duplicated MyApp per run, timed from its creation on the
// hub to its Deployments in every member and their replicas ready. The same
// run times the status figure (last member ready -> the MyApp's status
// says so) and the spec-change figure (an image update on the hub -> every
// member's template), then deletes the MyApp and waits for its cleanup.

package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// propagation runs the propagation, status, spec-change and floor figures:
// run 0 is a warm-up, then opts.runs counted runs.
func (b *bench) propagation(ctx context.Context) error {
	if err := b.waitQuiet(ctx, "propagation"); err != nil {
		return err
	}
	stopFlaps := b.watchFlaps(ctx)
	defer stopFlaps()
	for i := 0; i <= b.opts.runs; i++ {
		counted := i > 0
		if err := b.flotillaRun(ctx, i, counted); err != nil {
			return fmt.Errorf("propagation run %d: %w%s", i, err, b.deadSummary())
		}
		if err := b.directRun(ctx, i, counted); err != nil {
			return fmt.Errorf("floor run %d: %w%s", i, err, b.deadSummary())
		}
		b.load.sample("propagation")
	}
	return nil
}

// watchFlaps counts members leaving Ready while propagation is timed: the
// short heartbeat grace the failover figure needs could make a member
// flap on a loaded machine, and the report says whether it did.
func (b *bench) watchFlaps(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			w := b.obs.expect(func(o *observer) bool {
				for _, mc := range o.clusters {
					if !meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady) {
						return true
					}
				}
				return false
			})
			if _, err := w.wait(ctx, time.Hour, "a member leaving Ready"); err != nil {
				return
			}
			b.flaps.Add(1)
			progress("warning: a member left Ready during the propagation runs")
			// Wait for every member to be Ready again.
			back := b.obs.expect(func(o *observer) bool {
				for _, mc := range o.clusters {
					if !meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady) {
						return false
					}
				}
				return true
			})
			if _, err := back.wait(ctx, time.Hour, "members Ready again"); err != nil {
				return
			}
		}
	}()
	return cancel
}

// duplicatedApp is the propagation MyApp: replicasPerMember in every member.
func duplicatedApp(name string) *flotillav1.MyApp {
	return &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: flotillav1.MyAppSpec{
			Image:    imageV1,
			Replicas: ptr.To[int32](replicasPerMember),
			Placement: flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
				ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated,
			}},
		},
	}
}

// deploymentsOf is true when every member has Deployment name and ok holds
// for each.
func (b *bench) deploymentsOf(name string, ok func(*appsv1.Deployment) bool) func(*observer) bool {
	return func(o *observer) bool {
		for _, m := range b.members {
			d := o.deploys[m][name]
			if d == nil || (ok != nil && !ok(d)) {
				return false
			}
		}
		return true
	}
}

// readyWith says a Deployment has replicas, all of them up to date and
// ready, and its controller has seen its latest spec.
func readyWith(replicas int32) func(*appsv1.Deployment) bool {
	return func(d *appsv1.Deployment) bool {
		return ptr.Deref(d.Spec.Replicas, 1) == replicas && d.Status.ObservedGeneration >= d.Generation &&
			d.Status.Replicas == replicas && d.Status.UpdatedReplicas == replicas && d.Status.ReadyReplicas == replicas
	}
}

// workReady says Work w's status, as the hub holds it, reports its
// generation applied and its Deployment with replicas ready.
func workReady(w *flotillav1.Work, replicas int32) bool {
	if w == nil || w.Status.ObservedGeneration != w.Generation {
		return false
	}
	for _, m := range w.Status.Manifests {
		if m.Kind == "Deployment" && m.Workload != nil && m.Workload.ReadyReplicas == replicas {
			return true
		}
	}
	return false
}

func imageOf(d *appsv1.Deployment) string {
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return ""
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// flotillaRun times one MyApp through the hub: created -> Works ->
// Deployments -> ready -> MyApp status; then an image update; then it is
// deleted and its cleanup awaited.
func (b *bench) flotillaRun(ctx context.Context, i int, counted bool) error {
	name := fmt.Sprintf("prop-%03d", i)
	workName := flotillav1.WorkName(benchNamespace, name)
	n := int32(len(b.members))
	app := duplicatedApp(name)

	wWorks := b.obs.expect(func(o *observer) bool {
		for _, m := range b.members {
			if o.works[m][workName] == nil {
				return false
			}
		}
		return true
	})
	wExist := b.obs.expect(b.deploymentsOf(name, nil))
	// The status floor's probe starts the moment the last Deployment is
	// ready (see probeHub).
	probe := make(chan probeResult, 1)
	wReady := b.obs.expectThen(b.deploymentsOf(name, readyWith(replicasPerMember)), func(time.Time) { b.probeHub(ctx, probe) })
	wWorksReady := b.obs.expect(func(o *observer) bool {
		for _, m := range b.members {
			if !workReady(o.works[m][workName], replicasPerMember) {
				return false
			}
		}
		return true
	})
	// Each member's Deployment ready, and its Work's status ready.
	memberReady, memberWorkReady := map[string]*waiter{}, map[string]*waiter{}
	for _, m := range b.members {
		memberReady[m] = b.obs.expect(func(o *observer) bool {
			d := o.deploys[m][name]
			return d != nil && readyWith(replicasPerMember)(d)
		})
		memberWorkReady[m] = b.obs.expect(func(o *observer) bool { return workReady(o.works[m][workName], replicasPerMember) })
	}
	wApp := b.obs.expect(func(o *observer) bool {
		a := o.apps[name]
		if a == nil || a.Status.ObservedGeneration != a.Generation {
			return false
		}
		want := replicasPerMember * n
		c := meta.FindStatusCondition(a.Status.Conditions, flotillav1.ConditionReady)
		return a.Status.DesiredReplicas == want && a.Status.ReadyReplicas == want &&
			c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == a.Generation
	})

	before := scrapeHub(b.f)
	agentsBefore := scrapeAgents(b.f, b.members)
	t0 := time.Now()
	if err := b.f.Hub.Create(ctx, app); err != nil {
		return fmt.Errorf("creating MyApp %s: %w", name, err)
	}
	tWorks, err := wWorks.wait(ctx, b.opts.timeout, "the Works on the hub")
	if err != nil {
		return err
	}
	tExist, err := wExist.wait(ctx, b.opts.timeout, "the Deployments in the members")
	if err != nil {
		return err
	}
	after := scrapeHub(b.f)
	agentsAfter := scrapeAgents(b.f, b.members)
	tReady, err := wReady.wait(ctx, b.opts.timeout, "the Deployments ready")
	if err != nil {
		return err
	}
	tWorksReady, err := wWorksReady.wait(ctx, b.opts.timeout, "the Works' status ready on the hub")
	if err != nil {
		return err
	}
	tApp, err := wApp.wait(ctx, b.opts.timeout, "the MyApp status Ready")
	if err != nil {
		return err
	}
	afterStatus := scrapeHub(b.f)
	var floor probeResult
	select {
	case floor = <-probe:
	case <-time.After(b.opts.timeout):
		floor.err = fmt.Errorf("timed out after %s", b.opts.timeout)
	}
	if floor.err != nil {
		return fmt.Errorf("the status floor's write to the hub: %w", floor.err)
	}
	statusFrom := map[string]time.Duration{}
	for _, m := range b.members {
		// Both happened before the MyApp was Ready.
		dr, err := memberReady[m].wait(ctx, b.opts.timeout, m+"'s Deployment ready")
		if err != nil {
			return err
		}
		wr, err := memberWorkReady[m].wait(ctx, b.opts.timeout, m+"'s Work status ready on the hub")
		if err != nil {
			return err
		}
		statusFrom[m] = wr.Sub(dr)
	}

	var perMember []time.Duration
	toMember := map[string]time.Duration{}
	var lastWork, lastDeploy time.Time
	b.obs.read(func() {
		for _, m := range b.members {
			ws, ds := b.obs.workSeen[m+"/"+workName], b.obs.deploySeen[m+"/"+name]
			perMember = append(perMember, ds.Sub(ws))
			toMember[m] = ds.Sub(t0)
			if ws.After(lastWork) {
				lastWork = ws
			}
			if ds.After(lastDeploy) {
				lastDeploy = ds
			}
		}
	})

	// The image update.
	wSpec := b.obs.expect(b.deploymentsOf(name, func(d *appsv1.Deployment) bool { return imageOf(d) == imageV2 }))
	t1 := time.Now()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"image":%q}}`, imageV2)))
	if err := b.f.Hub.Patch(ctx, &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}, patch); err != nil {
		return fmt.Errorf("updating the image of %s: %w", name, err)
	}
	tSpec, err := wSpec.wait(ctx, b.opts.timeout, "the new image in the members")
	if err != nil {
		return err
	}

	written, writes := after.delta(before, "flotilla_myapp_works_written_seconds")
	queued, queuedN := after.delta(before, "flotilla_sync_queue_wait_seconds")
	sent, sentN := after.delta(before, "flotilla_sync_send_latency_seconds")
	progress("run %2d%s: propagation %s, to ready %s, status %s, spec %s; works seen %s, works written %s (%d), last work -> last deployment %s",
		i, warmup(counted), ms(tExist.Sub(t0)), ms(tReady.Sub(t0)), ms(tApp.Sub(tReady)), ms(tSpec.Sub(t1)),
		ms(tWorks.Sub(t0)), ms(seconds(written)), writes, ms(lastDeploy.Sub(lastWork)))
	if counted {
		b.prop.add(tExist.Sub(t0))
		b.propReady.add(tReady.Sub(t0))
		b.status.add(tApp.Sub(tReady))
		b.statusWorks.add(tWorksReady.Sub(tReady))
		for m, d := range statusFrom {
			b.statusMember[m].add(d)
		}
		if sum, n := afterStatus.delta(before, "flotilla_work_status_latency_seconds"); n > 0 {
			b.statusLatency.add(seconds(sum / float64(n)))
		}
		if sum, n := afterStatus.delta(before, "flotilla_work_status_write_duration_seconds"); n > 0 {
			b.statusWrite.add(seconds(sum / float64(n)))
			b.statusWrites = append(b.statusWrites, n)
		}
		b.statusApp.add(tApp.Sub(tWorksReady))
		b.statusFloor.add(floor.took)
		b.spec.add(tSpec.Sub(t1))
		b.worksSeen.add(tWorks.Sub(t0))
		b.writesPerRun[writes]++
		if writes > 0 {
			b.worksWritten.add(seconds(written / float64(writes)))
			b.beforeWrite.add(tWorks.Sub(t0) - seconds(written/float64(writes)))
		}
		for _, d := range perMember {
			b.workToDeploy.add(d)
		}
		for m, d := range toMember {
			b.propMember[m].add(d)
		}
		b.lastWorkToLastDeploy.add(lastDeploy.Sub(lastWork))
		// The agent's apply of the Work in each Pull member. It cannot be
		// taken off the Work -> Deployment time: the Deployment appears in
		// the middle of it (the applied-set records are written before
		// and after the server-side apply).
		for m, a := range agentsAfter {
			if sum, n := a.delta(agentsBefore[m], "flotilla_agent_apply_duration_seconds"); n > 0 {
				b.agentApply.add(seconds(sum / float64(n)))
			}
		}
		if queuedN > 0 {
			b.queueWait.add(seconds(queued / float64(queuedN)))
		}
		if sentN > 0 {
			b.sendLatency.add(seconds(sent / float64(sentN)))
		}
	}
	return b.deleteApp(ctx, name)
}

func warmup(counted bool) string {
	if counted {
		return ""
	}
	return " (warm-up)"
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// deleteApp deletes MyApp name and waits until it, its Works, its
// Deployments and their pods are gone, so runs do not overlap.
func (b *bench) deleteApp(ctx context.Context, name string) error {
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}
	if err := b.f.Hub.Delete(ctx, app); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting MyApp %s: %w", name, err)
	}
	var hubGone time.Time
	orphansRemoved := false
	return poll(ctx, b.opts.timeout, "MyApp "+name+" and its Deployments and pods to go", func() (string, error) {
		if hubGone.IsZero() {
			err := b.f.Hub.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{})
			if err == nil {
				return "the MyApp is still there", nil
			}
			if !apierrors.IsNotFound(err) {
				return "", err
			}
			var works flotillav1.WorkList
			if err := b.f.Hub.List(ctx, &works, client.MatchingLabels{flotillav1.LabelMyAppNamespace: benchNamespace, flotillav1.LabelMyAppName: name}); err != nil {
				return "", err
			}
			if len(works.Items) > 0 {
				return fmt.Sprintf("%d Works are still there", len(works.Items)), nil
			}
			hubGone = time.Now()
		}
		left, err := b.goneFromMembers(ctx, name, client.MatchingLabels{flotillav1.LabelMyAppName: name})
		if left != "" && err == nil && !orphansRemoved && time.Since(hubGone) > orphanGrace {
			// The MyApp and its Works are gone but a Deployment stayed:
			// an agent applied it again after deleting it. Count it and
			// remove it, so the next run starts clean.
			orphansRemoved = true
			for _, m := range b.members {
				d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}
				err := b.f.Member(m).Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground))
				if err == nil {
					b.orphans = append(b.orphans, m+"/"+name)
					progress("warning: Deployment %s stayed in %s %s after its MyApp and Works were gone; deleted it", name, m, orphanGrace)
				}
			}
		}
		return left, err
	})
}

// orphanGrace is how long a member Deployment may outlive its MyApp and
// Works before the benchmark calls it orphaned.
const orphanGrace = 5 * time.Second

// goneFromMembers says what is left of Deployment name and the pods sel
// selects in the members ("" when nothing).
func (b *bench) goneFromMembers(ctx context.Context, name string, sel client.MatchingLabels) (string, error) {
	for _, m := range b.members {
		c := b.f.Member(m)
		d := &appsv1.Deployment{}
		err := c.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: name}, d)
		if err == nil {
			return fmt.Sprintf("the Deployment is still in %s (created %s, uid %s, deletion %v, image %s)",
				m, d.CreationTimestamp.Format(time.RFC3339), d.UID, d.DeletionTimestamp, imageOf(d)), nil
		}
		if !apierrors.IsNotFound(err) {
			return "", err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(benchNamespace), sel); err != nil {
			return "", err
		}
		if len(pods.Items) > 0 {
			return fmt.Sprintf("%d pods are still in %s", len(pods.Items), m), nil
		}
	}
	return "", nil
}
