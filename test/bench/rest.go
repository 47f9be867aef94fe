// At rest: the memory of the hub and of every agent replica while each
// member holds -rest-works Works, after the fleet has settled (issue 21:
// an agent at rest with 100 Works held within 32 MiB, the hub within 64
// MiB). The MyApps are created, awaited Ready, measured, then deleted and
// their cleanup awaited, so the phases after start clean.

package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// restProc is one process's memory at rest.
type restProc struct {
	name string
	// rss is the median of the samples, anon and file its anonymous and
	// file-backed parts in the same sample; heap and goroutines come from
	// the process's /metrics at the last sample (0 when it did not
	// answer).
	rss, anon, file, heap int64
	// highest is the largest RSS of the samples: the median over a
	// window longer than the idle releaser's interval (pkg/idlemem)
	// could hide a process that is small only just after a release.
	highest    int64
	goroutines int
	note       string
	// exe is where the file-backed part lies: the resident pages of the
	// executable by package, at the last sample (nil when it could not
	// be read).
	exe *testutil.ExecutableResidence
	// role names the process in the record: "the hub" or "member-1's
	// leading agent"; empty for a standby.
	role string
}

// Targets of issue 21, for the report.
const (
	restAgentTarget = 32 << 20
	restHubTarget   = 64 << 20
)

// restApp is one at-rest MyApp: Duplicated, one replica in every member.
func restApp(name string) *flotillav1.MyApp {
	a := duplicatedApp(name)
	a.Spec.Replicas = ptr.To[int32](1)
	return a
}

// atRest creates opts.restWorks MyApps, waits until every one is Ready,
// lets the fleet settle, samples the memory of the hub and of every agent
// replica, and deletes the MyApps again.
func (b *bench) atRest(ctx context.Context) error {
	n := b.opts.restWorks
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("rest-%03d", i)
	}
	want := int32(len(b.members))
	allReady := b.obs.expect(func(o *observer) bool {
		for _, name := range names {
			a := o.apps[name]
			if a == nil || a.Status.ObservedGeneration != a.Generation || a.Status.ReadyReplicas != want ||
				!meta.IsStatusConditionTrue(a.Status.Conditions, flotillav1.ConditionReady) {
				return false
			}
		}
		return true
	})
	progress("at rest: creating %d MyApps Duplicated to all %d members (%d Works held by each member)", n, len(b.members), n)
	for _, name := range names {
		if err := b.f.Hub.Create(ctx, restApp(name)); err != nil {
			allReady.cancel()
			return fmt.Errorf("creating MyApp %s: %w", name, err)
		}
	}
	if _, err := allReady.wait(ctx, restTimeout, fmt.Sprintf("the %d at-rest MyApps Ready (1/1 in every member)", n)); err != nil {
		return err
	}
	progress("at rest: all %d MyApps Ready; letting the fleet settle", n)
	if err := b.waitQuiet(ctx, "at rest"); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(restSettle):
	}
	procs, err := b.sampleRest(ctx, n)
	if err != nil {
		return err
	}
	b.rest = procs
	if err := b.saveHeapProfiles(); err != nil {
		return err
	}
	if err := b.saveResidence(); err != nil {
		return err
	}
	progress("at rest: measured; deleting the %d MyApps", n)
	return b.deleteRest(ctx, names)
}

// saveHeapProfiles writes, with -heap-profiles, the heap profile of the
// hub and of every agent replica into that folder.
func (b *bench) saveHeapProfiles() error {
	dir := b.opts.heapProfiles
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	addrs := map[string]string{"hub": b.f.HubPprofAddr()}
	for _, m := range b.members {
		for _, name := range b.f.AgentReplicas(m) {
			addrs[name] = b.f.AgentPprofAddr(name)
		}
	}
	for name, addr := range addrs {
		if addr == "" {
			continue
		}
		path := filepath.Join(dir, name+".heap.pprof")
		if err := fleet.SaveHeapProfile(addr, path); err != nil {
			return fmt.Errorf("at rest: heap profile of %s: %w", name, err)
		}
		if err := fleet.SaveHeapText(addr, filepath.Join(dir, name+".heap.txt")); err != nil {
			return fmt.Errorf("at rest: heap profile of %s: %w", name, err)
		}
		progress("at rest: heap profile of %s in %s (and its MemStats in %s.heap.txt)", name, path, name)
	}
	return nil
}

// How long the at-rest MyApps may take to become Ready and to go, how
// long the fleet settles after, and how it is sampled.
const (
	restTimeout = 5 * time.Minute
	restSettle  = 15 * time.Second
	// 12 samples 5 s apart span 55 s, more than two intervals of the
	// idle releaser (pkg/idlemem, 20 s).
	restSamples  = 12
	restInterval = 5 * time.Second
)

// sampleRest samples the RSS of the hub and of every agent replica
// restSamples times, restInterval apart, and keeps each one's median.
func (b *bench) sampleRest(ctx context.Context, works int) ([]restProc, error) {
	type target struct {
		name, role string
		pid        func() (int, error)
		metrics    func() string
		note       string
	}
	targets := []target{{name: "hub", role: "the hub", pid: func() (int, error) { return b.f.HubPid(), nil }, metrics: b.f.HubMetrics,
		note: fmt.Sprintf("the hub with %d MyApps, %d Works and %d members", works, works*len(b.members), len(b.members))}}
	for _, m := range b.members {
		leader, _ := b.f.AgentLeader(m)
		for _, name := range b.f.AgentReplicas(m) {
			note, role := fmt.Sprintf("%s's agent, standby (holds no Works)", m), ""
			if name == leader {
				note, role = fmt.Sprintf("%s's agent, leader: %d Works held", m, works), m+"'s leading agent"
			}
			targets = append(targets, target{name: name, note: note, role: role,
				pid: func() (int, error) {
					p, err := b.f.AgentProcess(name)
					if err != nil {
						return 0, err
					}
					return p.Pid(), nil
				},
				metrics: func() string { return b.f.AgentMetrics(name) }})
		}
	}
	samples := make([][]testutil.Memory, len(targets))
	pids := make([]int, len(targets)) // at the last sample
	for i := range restSamples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(restInterval):
			}
		}
		for j, t := range targets {
			pid, err := t.pid()
			if err != nil {
				return nil, err
			}
			if pid == 0 {
				return nil, fmt.Errorf("at rest: %s is not running", t.name)
			}
			mem, err := testutil.Resident(pid)
			if err != nil {
				return nil, fmt.Errorf("at rest: RSS of %s (pid %d): %w", t.name, pid, err)
			}
			samples[j] = append(samples[j], mem)
			pids[j] = pid
		}
	}
	out := make([]restProc, len(targets))
	for j, t := range targets {
		s := slices.Clone(samples[j])
		slices.SortFunc(s, func(a, b testutil.Memory) int { return cmp.Compare(a.RSS, b.RSS) })
		med := s[len(s)/2]
		text := parseMetrics(t.metrics())
		out[j] = restProc{name: t.name, role: t.role, rss: med.RSS, anon: med.Anon, file: med.File, note: t.note, highest: s[len(s)-1].RSS,
			heap:       int64(text["go_memstats_heap_inuse_bytes"]),
			goroutines: int(text["go_goroutines"])}
		if r, err := testutil.ResidentExecutable(pids[j]); err == nil {
			out[j].exe = &r
		} else {
			progress("at rest: the resident pages of %s's executable: %v", t.name, err)
		}
	}
	return out, nil
}

// deleteRest deletes the at-rest MyApps and waits until their Works are
// gone from the hub and their Deployments from the members.
func (b *bench) deleteRest(ctx context.Context, names []string) error {
	for _, name := range names {
		app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}
		if err := b.f.Hub.Delete(ctx, app); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting MyApp %s: %w", name, err)
		}
	}
	return poll(ctx, restTimeout, "the at-rest MyApps, their Works and Deployments to go", func() (string, error) {
		for _, name := range names {
			var works flotillav1.WorkList
			if err := b.f.Hub.List(ctx, &works, client.MatchingLabels{flotillav1.LabelMyAppNamespace: benchNamespace, flotillav1.LabelMyAppName: name}); err != nil {
				return "", err
			}
			if len(works.Items) > 0 {
				return fmt.Sprintf("%d Works of %s are still on the hub", len(works.Items), name), nil
			}
		}
		for _, m := range b.members {
			var ds appsv1.DeploymentList
			if err := b.f.Member(m).List(ctx, &ds, client.InNamespace(benchNamespace)); err != nil {
				return "", err
			}
			for _, d := range ds.Items {
				if strings.HasPrefix(d.Name, "rest-") {
					return fmt.Sprintf("Deployment %s is still in %s", d.Name, m), nil
				}
			}
		}
		return "", nil
	})
}

// restTable renders the at-rest figures.
func restTable(procs []restProc, works int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "RSS is the median of %d samples %s apart, taken %s after every MyApp was Ready and the load average fell (or the wait for it ended); heap in use and goroutines from each process's /metrics. Targets (issue 21): an agent holding %d Works within %d MiB, the hub within %d MiB.\n\n",
		restSamples, restInterval, restSettle, works, restAgentTarget>>20, restHubTarget>>20)
	s.WriteString("Of the RSS, anonymous memory (heap, stacks, the runtime's) is what the process costs; file-backed is mostly its executable's pages, clean and shared, which the kernel drops and reads back under pressure.\n\n")
	s.WriteString("| process | RSS | anonymous | file-backed | highest RSS sample | heap in use | goroutines | |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range procs {
		fmt.Fprintf(&s, "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %d | %s |\n", p.name, mibOf(p.rss), mibOf(p.anon), mibOf(p.file), mibOf(p.highest), mibOf(p.heap), p.goroutines, p.note)
	}
	return s.String()
}

// residenceTable renders, for the hub and one leading agent, where the
// file-backed part of the RSS lies: the executable's resident pages by
// module (top rows; -rss-map writes every package).
func residenceTable(procs []restProc) string {
	var s strings.Builder
	var shown []restProc
	for _, p := range procs {
		if p.exe != nil && p.name == "hub" {
			shown = append(shown, p)
		}
	}
	for _, p := range procs {
		if p.exe != nil && p.name != "hub" && p.role != "" {
			shown = append(shown, p)
			break
		}
	}
	for _, p := range shown {
		mods := map[string]int64{}
		for _, pb := range p.exe.Packages {
			mods[testutil.ModuleOf(pb.Package)] += pb.Bytes
		}
		rows := make([]testutil.PackageBytes, 0, len(mods))
		for m, b := range mods {
			rows = append(rows, testutil.PackageBytes{Package: m, Bytes: b})
		}
		slices.SortFunc(rows, func(a, b testutil.PackageBytes) int { return cmp.Compare(b.Bytes, a.Bytes) })
		fmt.Fprintf(&s, "%s: %.1f MiB of its executable resident as file pages (%.1f MiB more written, so anonymous). By module (a page several share is split by their bytes; brackets: no package, such as the runtime's function table `[.gopclntab]`):\n\n",
			p.name, mibOf(p.exe.File), mibOf(p.exe.Anon))
		s.WriteString("| module | resident | |\n|---|---:|---:|\n")
		for i, r := range rows {
			if i == residenceRows {
				var rest int64
				for _, r := range rows[i:] {
					rest += r.Bytes
				}
				fmt.Fprintf(&s, "| %d others | %.2f MiB | %.0f %% |\n", len(rows)-i, mibOf(rest), 100*float64(rest)/float64(p.exe.File))
				break
			}
			fmt.Fprintf(&s, "| %s | %.2f MiB | %.0f %% |\n", r.Package, mibOf(r.Bytes), 100*float64(r.Bytes)/float64(p.exe.File))
		}
		s.WriteString("\n")
	}
	return s.String()
}

// residenceRows is how many modules residenceTable shows.
const residenceRows = 15

// saveResidence writes, with -rss-map, every process's resident
// executable pages by package into that folder as NAME.rss.tsv.
func (b *bench) saveResidence() error {
	dir := b.opts.rssMap
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range b.rest {
		if p.exe == nil {
			continue
		}
		var s strings.Builder
		fmt.Fprintf(&s, "# %s: %d bytes of %s resident as file pages, %d written\n", p.name, p.exe.File, p.exe.Executable, p.exe.Anon)
		for _, pb := range p.exe.Packages {
			fmt.Fprintf(&s, "%d\t%s\n", pb.Bytes, pb.Package)
		}
		path := filepath.Join(dir, p.name+".rss.tsv")
		if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
			return err
		}
		progress("at rest: resident pages of %s by package in %s", p.name, path)
	}
	return nil
}

func mibOf(b int64) float64 { return float64(b) / (1 << 20) }
