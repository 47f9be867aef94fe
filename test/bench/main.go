// Command bench is the end-to-end latency report of `make bench`. It starts
// a whole local Flotilla with test/fleet (a testbed hub and member clusters,
// real control planes; the hub and one agent per member as processes) and
// times, over many runs, what a user of the hub waits for:
//
//   - propagation: a MyApp Duplicated to every member is created on the hub
//     until its Deployment exists in every member, and until every replica
//     is ready there; and per member until its Deployment exists, with the
//     members in Push mode (-push-members, member-3 by default: no agent,
//     the hub applies their Works) set against those in Pull mode;
//   - status: the last member Deployment ready until the MyApp's status says
//     so;
//   - spec change: an image update on the hub until every member's
//     Deployment template has it;
//   - failover: a member's control plane stopped until its replicas are
//     ready in the other members;
//   - scale to zero: a Divided MyApp scaled to 0 until its member
//     Deployments are at 0 and its status Ready (ScaledToZero), and back
//     until the same Deployments are ready again;
//   - the floor: the same Deployments created directly in the members,
//     measured the same way in the same runs.
//
// Member-side times come from watches (informers) started before anything
// is created: the time of the first watch event that shows the state, not a
// poll. Run it from the repository root:
//
//	go run ./test/bench -runs=30 -failover-runs=30 -out bench.md
//
// main.go holds the flags and the order of the phases; each phase has a
// file of its own: propagation.go (with the status and spec-change
// figures, which the same runs time), floor.go, failover.go and zero.go
// (-zero-runs=0 skips it; -runs=0 -failover-runs=0 runs it alone). members.go
// prepares the members and watches their control planes, observe.go holds
// the watches that time things, and report.go the figures and the report.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

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
	zeroRuns     int
	shiftRuns    int
	members      int
	out          string
	dir          string
	buildFrom    string
	grace        time.Duration
	toleration   int
	timeout      time.Duration
	quietLoad    float64
	quietWait    time.Duration
	pushMembers  []string
	restWorks    int
	heapProfiles string
	rssMap       string
	jsonOut      string
	compareWith  string
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 30, "counted runs of the propagation, status, spec-change and floor figures (one warm-up run more; 0 skips them)")
	flag.IntVar(&o.failoverRuns, "failover-runs", 30, "counted failover runs (one warm-up run more; 0 skips failover)")
	flag.IntVar(&o.zeroRuns, "zero-runs", 30, "counted scale to zero and back runs (one warm-up run more; 0 skips them)")
	flag.IntVar(&o.shiftRuns, "shift-runs", 20, "counted health-shift runs: a signal breach -> the new split in the members and the HTTPRoute (one warm-up run more; 0 skips them)")
	flag.IntVar(&o.members, "members", 3, "member clusters (testbed.DefaultMembers)")
	flag.StringVar(&o.out, "out", "", "also write the markdown report to this file")
	flag.StringVar(&o.dir, "dir", "", "folder for the clusters, binaries and logs (default: a temporary folder, removed after a clean run)")
	flag.StringVar(&o.buildFrom, "build-from", "", "build the hub and agent from this git revision (e.g. HEAD) instead of the working tree, which may hold others' uncommitted changes")
	flag.DurationVar(&o.grace, "heartbeat-grace", 2*time.Second, "the hub's --heartbeat-grace")
	flag.IntVar(&o.toleration, "toleration", 1, "the failover MyApp's failover.clusterUnreachable.tolerationSeconds")
	flag.DurationVar(&o.timeout, "timeout", 90*time.Second, "how long one step may take before the benchmark gives up")
	flag.Float64Var(&o.quietLoad, "quiet-load", 1.5, "before each phase, wait until the 1-minute load average is below this (0: do not wait)")
	flag.DurationVar(&o.quietWait, "quiet-wait", 3*time.Minute, "the longest wait for -quiet-load before a phase starts anyway")
	flag.IntVar(&o.restWorks, "rest-works", 100, "at rest: MyApps Duplicated to every member (so many Works held by each) while the hub's and agents' memory is measured (0 skips it)")
	flag.StringVar(&o.rssMap, "rss-map", "", "at rest, also write where each process's file-backed memory lies (its executable's resident pages by package) into this folder as NAME.rss.tsv")
	flag.StringVar(&o.heapProfiles, "heap-profiles", "", "at rest, also save the heap profile of the hub and of every agent replica (after a GC, from --pprof-bind-address, which the fleet then sets) into this folder as NAME.heap.pprof, for go tool pprof, and as text with the runtime's MemStats as NAME.heap.txt; needs a hub and agent that take the flag")
	flag.StringVar(&o.jsonOut, "json", "", "also write every figure to this JSON file (a record for -compare)")
	flag.StringVar(&o.compareWith, "compare", "", "compare the figures with this recorded run (a -json file) and flag those more than 10 % worse")
	push := flag.String("push-members", "member-3", "comma-separated members in Push mode (no agent: the hub applies their Works); empty for an all-pull fleet")
	flag.Parse()
	for _, m := range strings.Split(*push, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.pushMembers = append(o.pushMembers, m)
		}
	}
	if o.runs < 0 || o.failoverRuns < 0 || o.zeroRuns < 0 || o.restWorks < 0 || o.members < 2 {
		fmt.Fprintln(os.Stderr, "bench: -runs, -failover-runs, -zero-runs and -rest-works must be at least 0 and -members at least 2")
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
	// Propagation to each member (MyApp created -> its Deployment exists),
	// by member name.
	propMember map[string]*series
	// statusMember is, per member, its Deployment ready -> its Work's
	// status ready on the hub.
	statusMember map[string]*series
	// Where propagation's time goes.
	worksSeen, worksWritten, beforeWrite, workToDeploy, lastWorkToLastDeploy, queueWait, sendLatency series
	// Where status's time goes: the Works' status on the hub, then the
	// MyApp's.
	statusWorks, statusApp, statusLatency, statusWrite series
	// statusFloor is one write to the hub, issued when the last member
	// Deployment is ready (see probeHub).
	statusFloor series
	// statusWrites are the Work status writes of each counted run.
	statusWrites []int
	// The agent's apply of a Work in a Pull member.
	agentApply series
	// How many Works-written observations each counted run had.
	writesPerRun map[int]int
	// Scale to zero and back.
	zeroDown, zeroDownStatus, zeroUp, zeroUpStatus series
	// Health shift: breach -> split in the members, -> HTTPRoute; back.
	shiftSplit, shiftRoute, shiftBack series
	// At rest: the hub's and each agent replica's memory.
	rest []restProc
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
		PushMembers:    o.pushMembers,
		Progress:       progressWriter{},
		Pprof:          o.heapProfiles != "",
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

	b := &bench{opts: o, f: f, obs: newObserver(), members: f.MemberNames(), writesPerRun: map[int]int{}, propMember: map[string]*series{}, statusMember: map[string]*series{}}
	b.names()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	var runErr error
	if o.runs > 0 {
		runErr = b.propagation(ctx)
	}
	if runErr == nil && o.restWorks > 0 {
		runErr = b.atRest(ctx)
	}
	if runErr == nil && o.zeroRuns > 0 {
		runErr = b.zero(ctx)
	}
	if runErr == nil && o.shiftRuns > 0 {
		runErr = b.healthShift(ctx)
	}
	if runErr == nil && o.failoverRuns > 0 {
		runErr = b.failover(ctx)
	}
	report := b.report(mach, loadStart, loadavg(), runErr)
	rec := b.record(mach)
	if o.compareWith != "" {
		if prev, err := readRecord(o.compareWith); err != nil {
			report += fmt.Sprintf("\n### Against the recorded run\n\nNot compared: %v\n", err)
		} else {
			report += "\n### Against the recorded run\n\n" + compare(prev, rec)
		}
	}
	fmt.Print(report)
	if o.jsonOut != "" && runErr == nil {
		if err := writeRecord(o.jsonOut, rec); err != nil {
			runErr = err
		}
	}
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
	for _, m := range b.members {
		b.propMember[m] = &series{name: fmt.Sprintf("propagation to %s (%s): MyApp created -> its Deployment exists", m, b.f.SyncMode(m))}
		b.statusMember[m] = &series{name: fmt.Sprintf("status from %s (%s): its Deployment ready -> its Work's status ready on the hub", m, b.f.SyncMode(m))}
	}

	b.shiftSplit.name = "health shift: signal above its threshold (for 1s) -> the new split (2 / 8) in both members"
	b.shiftRoute.name = "health shift: signal above its threshold (for 1s) -> the HTTPRoute on the hub at 20 / 80"
	b.shiftBack.name = fmt.Sprintf("health shift: signal back below -> the normal split (8 / 2) in both members (recovery window %s)", shiftRecovery)
	b.zeroDown.name = fmt.Sprintf("scale to zero: replicas %d -> 0 on the hub -> the same Deployments at 0 in all %d members", replicasPerMember*n, n)
	b.zeroDownStatus.name = "scale to zero: replicas -> 0 on the hub -> MyApp Ready (ScaledToZero, 0/0)"
	b.zeroUp.name = fmt.Sprintf("scale from zero: replicas 0 -> %d on the hub -> the same Deployments %d/%d ready in all %d members", replicasPerMember*n, replicasPerMember, replicasPerMember, n)
	b.zeroUpStatus.name = fmt.Sprintf("scale from zero: replicas 0 -> %d on the hub -> MyApp Ready", replicasPerMember*n)

	b.worksSeen.name = fmt.Sprintf("MyApp created -> all %d Works seen on the hub (hub watch)", n)
	b.worksWritten.name = "hub: MyApp reconcile start -> its Works written (flotilla_myapp_works_written_seconds)"
	b.beforeWrite.name = "MyApp created -> reconcile start, plus the Works' watch delivery (the first less the second)"
	b.workToDeploy.name = "a Work seen on the hub -> its Deployment seen in its member (each member)"
	b.lastWorkToLastDeploy.name = "last Work seen -> last Deployment seen"
	b.queueWait.name = "sync server: Work queued -> taken for sending (flotilla_sync_queue_wait_seconds, mean per run)"
	b.sendLatency.name = "sync server: one stream Send (flotilla_sync_send_latency_seconds, mean per run)"
	b.statusWorks.name = fmt.Sprintf("status: last member Deployment ready -> all %d Works' status ready on the hub (agent's report, stream, status write; hub watch)", n)
	b.statusApp.name = "status: all Works' status ready on the hub -> MyApp status Ready (MyApp reconcile, status write; hub watch)"
	b.statusLatency.name = "hub: a status report reaching the Work status writer -> written (flotilla_work_status_latency_seconds, mean per run, MyApp created -> Ready)"
	b.statusWrite.name = "hub: one Work status patch (flotilla_work_status_write_duration_seconds, mean per run)"
	b.statusFloor.name = "status floor: one write to the hub (a Lease patch), issued when the last member Deployment is ready"
	b.agentApply.name = "agent: apply of the Work, the applied-set records and the server-side apply (flotilla_agent_apply_duration_seconds, mean per run; each Pull member; the Deployment appears within it)"

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
