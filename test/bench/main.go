// Command bench is the end-to-end latency report of `make bench`. It starts
// a whole local Flotilla with test/fleet (a testbed hub and member clusters,
// real control planes; the hub and one agent per member as processes) and
// times, over many runs, what a user of the hub waits for:
//
//   - propagation: a MyApp Duplicated to every member is created on the hub
//     until its Deployment exists in every member, and until every replica
//     is ready there;
//   - status: the last member Deployment ready until the MyApp's status says
//     so;
//   - spec change: an image update on the hub until every member's
//     Deployment template has it;
//   - failover: a member's control plane stopped until its replicas are
//     ready in the other members;
//   - the floor: the same Deployments created directly in the members,
//     measured the same way in the same runs.
//
// Member-side times come from watches (informers) started before anything
// is created: the time of the first watch event that shows the state, not a
// poll. Run it from the repository root:
//
//	go run ./test/bench -runs=30 -failover-runs=30 -out bench.md
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// benchNamespace holds the MyApps on the hub and the Deployments in the
// members.
const benchNamespace = "bench"

// The images a MyApp starts with and is updated to (kwok runs no images).
const (
	imageV1 = "registry.example.com/bench/web:1.0"
	imageV2 = "registry.example.com/bench/web:2.0"
)

// replicasPerMember is the Duplicated MyApp's replicas (in every member) and
// the failover MyApp's share per member.
const replicasPerMember = 3

type options struct {
	runs         int
	failoverRuns int
	members      int
	out          string
	dir          string
	buildFrom    string
	grace        time.Duration
	toleration   int
	timeout      time.Duration
	quietLoad    float64
	quietWait    time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 30, "counted runs of the propagation, status, spec-change and floor figures (one warm-up run more)")
	flag.IntVar(&o.failoverRuns, "failover-runs", 30, "counted failover runs (one warm-up run more; 0 skips failover)")
	flag.IntVar(&o.members, "members", 3, "member clusters (testbed.DefaultMembers)")
	flag.StringVar(&o.out, "out", "", "also write the markdown report to this file")
	flag.StringVar(&o.dir, "dir", "", "folder for the clusters, binaries and logs (default: a temporary folder, removed after a clean run)")
	flag.StringVar(&o.buildFrom, "build-from", "", "build the hub and agent from this git revision (e.g. HEAD) instead of the working tree, which may hold others' uncommitted changes")
	flag.DurationVar(&o.grace, "heartbeat-grace", 2*time.Second, "the hub's --heartbeat-grace")
	flag.IntVar(&o.toleration, "toleration", 1, "the failover MyApp's failover.clusterUnreachable.tolerationSeconds")
	flag.DurationVar(&o.timeout, "timeout", 90*time.Second, "how long one step may take before the benchmark gives up")
	flag.Float64Var(&o.quietLoad, "quiet-load", 1.5, "before each phase, wait until the 1-minute load average is below this (0: do not wait)")
	flag.DurationVar(&o.quietWait, "quiet-wait", 3*time.Minute, "the longest wait for -quiet-load before a phase starts anyway")
	flag.Parse()
	if o.runs < 1 || o.failoverRuns < 0 || o.members < 2 {
		fmt.Fprintln(os.Stderr, "bench: -runs must be at least 1, -failover-runs at least 0 and -members at least 2")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// The first Ctrl-C stops the fleet cleanly; a second one kills.
		stop()
	}()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench is one benchmark: the fleet, the observer and the figures.
type bench struct {
	opts    options
	f       *fleet.Fleet
	obs     *observer
	members []string
	load    loadTracker

	// The figures.
	prop, propReady, status, spec, failRaw, failNet, direct, directReady series
	// Where propagation's time goes.
	worksSeen, worksWritten, beforeWrite, workToDeploy, lastWorkToLastDeploy, queueWait, sendLatency series
	// How many Works-written observations each counted run had.
	writesPerRun map[int]int
	// Where failover's time goes.
	fStopCall, fDisconnected, fTaint, fNotReady, fWorks, fReady, fFailback series
	// Members leaving Ready during the propagation runs.
	flaps atomic.Int64
	// Member Deployments that outlived their MyApp ("member/name").
	orphans []string
	// procs are the names of each member's control-plane processes.
	procs map[string][]string
	// incidents are testbed processes found dead (and restarted).
	incidents []string
}

func run(ctx context.Context, o options) (err error) {
	// The informers' and clients' own logs would only repeat what the
	// benchmark reports.
	ctrllog.SetLogger(logr.Discard())

	root, err := repoRoot()
	if err != nil {
		return err
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "flotilla-bench-"); err != nil {
			return err
		}
		defer func() {
			if err == nil || errors.Is(err, context.Canceled) {
				os.RemoveAll(dir)
			} else {
				fmt.Fprintf(os.Stderr, "bench: logs kept in %s\n", filepath.Join(dir, "fleet", "logs"))
			}
		}()
	}
	mach := describeMachine(root)
	src := root
	mach.built = "the working tree"
	if o.buildFrom != "" {
		src = filepath.Join(dir, "src")
		if mach.built, err = exportRevision(root, o.buildFrom, src); err != nil {
			return err
		}
	}
	progress("building the hub and agent from %s into %s", mach.built, filepath.Join(dir, "bin"))
	if err := fleet.BuildBinaries(src, filepath.Join(dir, "bin")); err != nil {
		return err
	}

	loadStart := loadavg()
	binDir := ""
	if os.Getenv("FLOTILLA_BIN") == "" {
		binDir = filepath.Join(root, "bin")
	}
	f, err := fleet.Start(ctx, fleet.Config{
		Dir:            filepath.Join(dir, "fleet"),
		BinDir:         binDir,
		FlotillaBinDir: filepath.Join(dir, "bin"),
		CRDDir:         filepath.Join(src, "deploy", "hub", "crds"),
		Members:        testbed.DefaultMembers(o.members),
		HeartbeatGrace: o.grace,
		Progress:       progressWriter{},
	})
	if err != nil {
		return err
	}
	defer func() {
		progress("stopping the fleet")
		if serr := f.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the fleet: %w", serr))
		}
	}()

	b := &bench{opts: o, f: f, obs: newObserver(), members: f.MemberNames(), writesPerRun: map[int]int{}}
	b.names()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	runErr := b.propagation(ctx)
	if runErr == nil && o.failoverRuns > 0 {
		runErr = b.failover(ctx)
	}
	report := b.report(mach, loadStart, loadavg(), runErr)
	fmt.Print(report)
	if o.out != "" {
		if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
			runErr = errors.Join(runErr, err)
		} else if err := os.WriteFile(o.out, []byte(report), 0o644); err != nil {
			runErr = errors.Join(runErr, err)
		}
	}
	return runErr
}

// names labels the figures.
func (b *bench) names() {
	n := len(b.members)
	b.prop.name = fmt.Sprintf("propagation: MyApp created -> Deployment exists in all %d members", n)
	b.propReady.name = fmt.Sprintf("propagation to ready: MyApp created -> %d/%d ready in all %d members", replicasPerMember, replicasPerMember, n)
	b.status.name = "status: last member Deployment ready -> MyApp status Ready (readyReplicas == desired)"
	b.spec.name = fmt.Sprintf("spec change: image updated on the hub -> template updated in all %d members", n)
	b.failRaw.name = fmt.Sprintf("failover: %s stopped -> its replicas ready in the other members (raw)", b.victim())
	b.failNet.name = fmt.Sprintf("failover minus heartbeat grace (%s) and toleration (%d s)", b.opts.grace, b.opts.toleration)
	b.direct.name = fmt.Sprintf("floor: %d Deployments created directly (parallel) -> exist in all %d members", n, n)
	b.directReady.name = fmt.Sprintf("floor: created directly -> %d/%d ready in all %d members", replicasPerMember, replicasPerMember, n)

	b.worksSeen.name = fmt.Sprintf("MyApp created -> all %d Works seen on the hub (hub watch)", n)
	b.worksWritten.name = "hub: MyApp reconcile start -> its Works written (flotilla_myapp_works_written_seconds)"
	b.beforeWrite.name = "MyApp created -> reconcile start, plus the Works' watch delivery (the first less the second)"
	b.workToDeploy.name = "a Work seen on the hub -> its Deployment seen in its member (each member)"
	b.lastWorkToLastDeploy.name = "last Work seen -> last Deployment seen"
	b.queueWait.name = "sync server: Work queued -> taken for sending (flotilla_sync_queue_wait_seconds, mean per run)"
	b.sendLatency.name = "sync server: one stream Send (flotilla_sync_send_latency_seconds, mean per run)"

	v := b.victim()
	b.fStopCall.name = fmt.Sprintf("StopMember(%s) call (the control plane shutting down)", v)
	b.fDisconnected.name = fmt.Sprintf("%s stopped -> MemberCluster Connected=False (the agent's member gate: 3 failed /readyz checks 1 s apart, then it closes its stream)", v)
	b.fTaint.name = fmt.Sprintf("Connected=False -> unreachable taint (heartbeat grace %s from the last heartbeat)", b.opts.grace)
	b.fNotReady.name = "(unreachable taint -> Ready=False seen: same reconcile, taint written first)"
	b.fWorks.name = fmt.Sprintf("taint -> the other members' Works updated (toleration %d s from the taint's TimeAdded, which is truncated to the second)", b.opts.toleration)
	b.fReady.name = "Works updated -> the other members' Deployments ready"
	b.fFailback.name = fmt.Sprintf("failback: StartMember(%s) -> 2 replicas ready in every member again (settled)", v)
}

// victim is the member stopped for failover.
func (b *bench) victim() string { return fmt.Sprintf("member-%d", 2) }

// prepare creates the bench namespace everywhere and starts the watches.
func (b *bench) prepare(ctx context.Context) error {
	ns := func(c client.Client) error {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err := ns(b.f.Hub); err != nil {
		return err
	}
	if err := b.obs.watchHub(ctx, b.f.HubConfig); err != nil {
		return err
	}
	b.procs = map[string][]string{}
	for _, m := range b.members {
		for name := range b.f.Testbed.Member(m).PIDs() {
			b.procs[m] = append(b.procs[m], name)
		}
		slices.Sort(b.procs[m])
		if err := ns(b.f.Member(m)); err != nil {
			return err
		}
		if err := b.watchMember(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// restartDead restarts every member with a dead control-plane process
// and records the incident.
func (b *bench) restartDead(ctx context.Context) (restarted bool, err error) {
	for _, m := range b.members {
		dead := b.deadProcesses(m)
		if len(dead) == 0 {
			continue
		}
		msg := fmt.Sprintf("%s of %s exited", strings.Join(dead, ", "), m)
		b.incidents = append(b.incidents, msg)
		progress("warning: %s (logs in %s); restarting %s", msg, filepath.Join(b.f.Testbed.Member(m).Dir, "logs"), m)
		restarted = true
		b.obs.stopMember(m)
		if err := b.f.StopMember(m); err != nil {
			progress("warning: stopping %s: %v", m, err)
		}
		if err := b.f.StartMember(ctx, m); err != nil {
			return restarted, err
		}
		if err := b.watchMember(ctx, m); err != nil {
			return restarted, err
		}
	}
	return restarted, nil
}

// deadSummary names dead control-plane processes, for error messages.
func (b *bench) deadSummary() string {
	var parts []string
	for _, m := range b.members {
		if dead := b.deadProcesses(m); len(dead) > 0 {
			parts = append(parts, fmt.Sprintf("%s of %s", strings.Join(dead, ", "), m))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (testbed processes exited: " + strings.Join(parts, "; ") + ")"
}

// deadProcesses names the control-plane processes of member m that were
// running at the start and are not now.
func (b *bench) deadProcesses(m string) []string {
	running := b.f.Testbed.Member(m).PIDs()
	var dead []string
	for _, name := range b.procs[m] {
		if _, ok := running[name]; !ok {
			dead = append(dead, name)
		}
	}
	return dead
}

func (b *bench) watchMember(ctx context.Context, m string) error {
	cfg, err := b.f.Testbed.Member(m).RESTConfig()
	if err != nil {
		return err
	}
	return b.obs.watchMember(ctx, m, cfg)
}

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

// waitQuiet waits up to -quiet-wait for the 1-minute load average to fall
// below -quiet-load (starting the fleet alone raises it), so that a phase
// does not start on a machine still busy with the last one or with
// something else.
func (b *bench) waitQuiet(ctx context.Context, phase string) error {
	if b.opts.quietLoad <= 0 {
		return nil
	}
	start := time.Now()
	for load1() >= b.opts.quietLoad {
		if time.Since(start) > b.opts.quietWait {
			progress("starting the %s runs at load average %s: still not below %.2f after %s", phase, loadavg(), b.opts.quietLoad, b.opts.quietWait)
			b.load.startPhase(phase)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
	progress("starting the %s runs at load average %s (waited %s for it to fall below %.2f)", phase, loadavg(), time.Since(start).Round(time.Second), b.opts.quietLoad)
	b.load.startPhase(phase)
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
	wReady := b.obs.expect(b.deploymentsOf(name, readyWith(replicasPerMember)))
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
	tReady, err := wReady.wait(ctx, b.opts.timeout, "the Deployments ready")
	if err != nil {
		return err
	}
	tApp, err := wApp.wait(ctx, b.opts.timeout, "the MyApp status Ready")
	if err != nil {
		return err
	}

	var perMember []time.Duration
	var lastWork, lastDeploy time.Time
	b.obs.read(func() {
		for _, m := range b.members {
			ws, ds := b.obs.workSeen[m+"/"+workName], b.obs.deploySeen[m+"/"+name]
			perMember = append(perMember, ds.Sub(ws))
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
		b.lastWorkToLastDeploy.add(lastDeploy.Sub(lastWork))
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

// directDeployment is the floor's Deployment: what the hub renders for a
// MyApp of the same name, with labels of its own so no agent takes it for
// one of its Works' objects.
func directDeployment(name string) *appsv1.Deployment {
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}, Spec: flotillav1.MyAppSpec{Image: imageV1}}
	d := render.Deployment(app, replicasPerMember, render.ClusterOverrides{})
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

// poll calls check every 100 ms until it says done (an empty string and
// no error) or timeout passes; check's last answer says what was left. An
// error from check does not stop it: the next call may succeed.
func poll(ctx context.Context, timeout time.Duration, what string, check func() (string, error)) error {
	err := testutil.Poll(ctx, timeout, func() error {
		left, err := check()
		if err != nil {
			return err
		}
		if left != "" {
			return errors.New(left)
		}
		return nil
	}, testutil.Every(100*time.Millisecond))
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for %s: %w", what, err)
	default:
		return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, err)
	}
}

// metrics is a scrape of histogram sums and counts by metric name.
type metrics map[string]float64

func scrapeHub(f *fleet.Fleet) metrics {
	out := metrics{}
	for _, line := range strings.Split(fleet.Scrape(f.HubMetricsAddr()), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok || !(strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count")) || strings.Contains(name, "{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(value), "%g", &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// delta returns how much histogram name's sum and count grew since before.
func (m metrics) delta(before metrics, name string) (sum float64, count int) {
	return m[name+"_sum"] - before[name+"_sum"], int(m[name+"_count"] - before[name+"_count"])
}

// report renders the markdown report.
func (b *bench) report(mach machine, loadStart, loadEnd string, runErr error) string {
	var s strings.Builder
	n := len(b.members)
	fmt.Fprintf(&s, "## Flotilla end-to-end latency, hub + %d members\n\n", n)
	fmt.Fprintf(&s, "- machine: %d CPUs (%s), %s memory; Go %s\n", mach.cpus, mach.model, mach.memory, mach.goVer)
	fmt.Fprintf(&s, "- commit %s; hub and agent built from %s\n", mach.commit, mach.built)
	fmt.Fprintf(&s, "- started %s, took %s; load average (1, 5, 15 min) at start %s, at end %s; %s\n",
		mach.started.UTC().Format(time.RFC3339), time.Since(mach.started).Round(time.Second), loadStart, loadEnd, b.load.summary())
	fmt.Fprintf(&s, "- testbed: real etcd, kube-apiserver, controller-manager, scheduler and kwok per cluster; hub and one agent per member as processes; hub --heartbeat-grace %s, agent heartbeat 1s\n", b.opts.grace)
	fmt.Fprintf(&s, "- MyApp: Duplicated, %d replicas in each member, a fresh MyApp per run; the failover MyApp: Divided, static weights 1:...:1 of %d, tolerationSeconds %d, failback window 1 s\n",
		replicasPerMember, 2*n, b.opts.toleration)
	fmt.Fprintf(&s, "- each phase starts with one warm-up run that is not counted; percentiles are nearest-rank, so with fewer than 100 runs p99 is the slowest run\n")
	if k := b.flaps.Load(); k > 0 {
		fmt.Fprintf(&s, "- warning: members left Ready %d times during the propagation runs (heartbeat grace %s on a loaded machine)\n", k, b.opts.grace)
	}
	if len(b.orphans) > 0 {
		fmt.Fprintf(&s, "- warning: %d member Deployments stayed after their MyApp and Works were gone (an agent applied them again after deleting them) and were deleted by the benchmark: %s\n",
			len(b.orphans), strings.Join(b.orphans, ", "))
	}
	if len(b.incidents) > 0 {
		fmt.Fprintf(&s, "- testbed incidents (the member was restarted and that run's failback time not counted): %s\n", strings.Join(b.incidents, "; "))
	}
	if runErr != nil {
		fmt.Fprintf(&s, "- the benchmark stopped early: %v\n", runErr)
	}
	s.WriteString("\n")
	s.WriteString(table([]*series{&b.prop, &b.propReady, &b.status, &b.spec, &b.failRaw, &b.failNet, &b.direct, &b.directReady}))
	s.WriteString("\n### Where propagation's time goes\n\n")
	s.WriteString(table([]*series{&b.worksSeen, &b.worksWritten, &b.beforeWrite, &b.workToDeploy, &b.lastWorkToLastDeploy, &b.queueWait, &b.sendLatency}))
	if len(b.writesPerRun) > 0 {
		var parts []string
		for k := 0; k <= 10; k++ {
			if c := b.writesPerRun[k]; c > 0 {
				parts = append(parts, fmt.Sprintf("%d runs with %d", c, k))
			}
		}
		fmt.Fprintf(&s, "\nWorks-written observations per run (a reconcile that wrote Works): %s.\n", strings.Join(parts, ", "))
	}
	if len(b.failRaw.samples) > 0 {
		s.WriteString("\n### Where failover's time goes\n\n")
		s.WriteString("The first four rows after the call add up to the raw failover time.\n\n")
		s.WriteString(table([]*series{&b.fStopCall, &b.fDisconnected, &b.fTaint, &b.fWorks, &b.fReady, &b.fNotReady, &b.fFailback}))
	}
	return s.String()
}

// exportRevision writes git revision rev of the repository at root into
// dir (git archive) and names what it exported.
func exportRevision(root, rev, dir string) (string, error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("resolving -build-from %q: %w", rev, err)
	}
	sha := strings.TrimSpace(string(out))
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, sha, dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("exporting %s: %v\n%s", sha, err, b)
	}
	return fmt.Sprintf("commit %s (git archive, without uncommitted changes)", sha), nil
}

// repoRoot finds the repository root: the folder with this module's go.mod
// at or above the working directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/flotilla-dev/flotilla\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("run from inside the flotilla repository (no go.mod of github.com/flotilla-dev/flotilla found)")
		}
	}
}

// progress prints a line to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// progressWriter prefixes the fleet's progress lines with the time.
type progressWriter struct{}

func (progressWriter) Write(p []byte) (int, error) {
	_, err := io.WriteString(os.Stderr, time.Now().Format("15:04:05 ")+string(p))
	return len(p), err
}
