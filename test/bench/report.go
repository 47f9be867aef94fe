package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// series is one figure's samples.
type series struct {
	name    string
	samples []time.Duration
}

func (s *series) add(d time.Duration) { s.samples = append(s.samples, d) }

// percentile is the nearest-rank percentile: the smallest sample with at
// least p% of the samples at or below it. With 30 samples p99 is the
// largest one.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// ms formats d in milliseconds, with one decimal below 10 ms.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.1f ms", v)
	case math.Abs(v) < 10000:
		return fmt.Sprintf("%.0f ms", v)
	default:
		return fmt.Sprintf("%.2f s", v/1000)
	}
}

// table renders rows of series as a markdown table.
func table(rows []*series) string {
	var b strings.Builder
	b.WriteString("| figure | p50 | p90 | p99 | runs |\n|---|---:|---:|---:|---:|\n")
	for _, s := range rows {
		if len(s.samples) == 0 {
			fmt.Fprintf(&b, "| %s | - | - | - | 0 |\n", s.name)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", s.name,
			ms(percentile(s.samples, 50)), ms(percentile(s.samples, 90)), ms(percentile(s.samples, 99)), len(s.samples))
	}
	return b.String()
}

// loadTracker samples the 1-minute load average after every run, by phase.
type loadTracker struct {
	mu      sync.Mutex
	phases  []string
	samples map[string][]float64
	started map[string]string // phase -> load average when it started
}

// startPhase records the load average as phase starts.
func (l *loadTracker) startPhase(phase string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started == nil {
		l.started = map[string]string{}
	}
	l.started[phase] = loadavg()
}

// loadavg returns /proc/loadavg's three averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	f := strings.Fields(loadavg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func (l *loadTracker) sample(phase string) {
	v := load1()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.samples == nil {
		l.samples = map[string][]float64{}
	}
	if _, ok := l.samples[phase]; !ok {
		l.phases = append(l.phases, phase)
	}
	l.samples[phase] = append(l.samples[phase], v)
}

// summary says, per phase, the lowest, median and highest sample.
func (l *loadTracker) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.phases) == 0 {
		return "no samples"
	}
	var parts []string
	for _, p := range l.phases {
		s := slices.Clone(l.samples[p])
		slices.Sort(s)
		parts = append(parts, fmt.Sprintf("%s runs (started at %s) min %.2f, median %.2f, max %.2f", p, l.started[p], s[0], s[len(s)/2], s[len(s)-1]))
	}
	return "1-min load average after each run: " + strings.Join(parts, "; ")
}

// machine describes where the benchmark runs.
type machine struct {
	cpus    int
	model   string
	memory  string
	goVer   string
	commit  string
	built   string
	started time.Time
}

func describeMachine(root string) machine {
	m := machine{cpus: runtime.NumCPU(), model: "unknown", memory: "unknown", goVer: runtime.Version(), commit: "unknown", started: time.Now()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == "MemTotal" {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				m.memory = fmt.Sprintf("%.1f GiB", kb/1024/1024)
				break
			}
		}
		f.Close()
	}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			m.commit += " (working tree has uncommitted changes)"
		}
	}
	return m
}

// metrics is a scrape's unlabelled samples (histogram sums and counts,
// Go runtime gauges) by metric name.
type metrics map[string]float64

func scrapeHub(f *fleet.Fleet) metrics { return parseMetrics(f.HubMetrics()) }

// scrapeAgents scrapes the leading agent of each Pull member, by member.
func scrapeAgents(f *fleet.Fleet, members []string) map[string]metrics {
	out := map[string]metrics{}
	for _, m := range members {
		if f.SyncMode(m) == flotillav1.SyncModePush {
			continue
		}
		if _, text, err := f.AgentLeaderMetrics(m); err == nil {
			out[m] = parseMetrics(text)
		}
	}
	return out
}

// parseMetrics reads the unlabelled samples of a /metrics text.
func parseMetrics(text string) metrics {
	out := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
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

// pushVsPull is the report's "push vs pull" line: the p50 (and p99) of the
// Push members' propagation samples against the Pull members', each
// pooled over its members; "" unless both modes have samples.
func pushVsPull(push, pull []time.Duration) string {
	if len(push) == 0 || len(pull) == 0 {
		return ""
	}
	p50, l50 := percentile(push, 50), percentile(pull, 50)
	diff := p50 - l50
	sign := "+"
	if diff < 0 {
		sign, diff = "-", -diff
	}
	return fmt.Sprintf("push vs pull: propagation p50 %s to the Push members against %s to the Pull members (%s%s, %.2fx); p99 %s against %s; %d and %d samples",
		ms(p50), ms(l50), sign, ms(diff), float64(p50)/float64(l50), ms(percentile(push, 99)), ms(percentile(pull, 99)), len(push), len(pull))
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
	if push := b.f.PushMemberNames(); len(push) > 0 {
		fmt.Fprintf(&s, "- sync modes: %s in Push mode (no agent: the hub applies their Works through their kubeconfig), the others in Pull mode\n", strings.Join(push, ", "))
	}
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
	if len(b.prop.samples) > 0 || len(b.failRaw.samples) > 0 {
		s.WriteString(table([]*series{&b.prop, &b.propReady, &b.status, &b.spec, &b.failRaw, &b.failNet, &b.direct, &b.directReady}))
	}
	if len(b.prop.samples) > 0 {
		s.WriteString("\n### Propagation per member, Push and Pull\n\n")
		var rows []*series
		var push, pull []time.Duration
		for _, m := range b.members {
			rows = append(rows, b.propMember[m])
			if b.f.SyncMode(m) == flotillav1.SyncModePush {
				push = append(push, b.propMember[m].samples...)
			} else {
				pull = append(pull, b.propMember[m].samples...)
			}
		}
		s.WriteString(table(rows))
		if line := pushVsPull(push, pull); line != "" {
			s.WriteString("\n" + line + "\n")
		}
		s.WriteString("\n### Where propagation's time goes\n\n")
		s.WriteString(table([]*series{&b.worksSeen, &b.worksWritten, &b.beforeWrite, &b.workToDeploy, &b.lastWorkToLastDeploy, &b.queueWait, &b.sendLatency, &b.agentApply}))
		s.WriteString("\n### Where status's time goes\n\n")
		rows = []*series{&b.status, &b.statusWorks, &b.statusApp, &b.statusLatency, &b.statusWrite, &b.statusFloor}
		for _, m := range b.members {
			rows = append(rows, b.statusMember[m])
		}
		s.WriteString(table(rows))
		s.WriteString("\nThe figures that end at a Work's status on the hub include the hub's `--work-status-linger` (its default: the fleet sets none), which a report waits before its write; the MyApp's status is computed from the reports and does not wait for it.\n")
		if len(b.statusWrites) > 0 {
			w := slices.Clone(b.statusWrites)
			slices.Sort(w)
			fmt.Fprintf(&s, "\nWork status writes per run (MyApp created -> Ready, %d Works): median %d, min %d, max %d.\n", n, w[len(w)/2], w[0], w[len(w)-1])
		}
	}
	if len(b.writesPerRun) > 0 {
		var parts []string
		for k := 0; k <= 10; k++ {
			if c := b.writesPerRun[k]; c > 0 {
				parts = append(parts, fmt.Sprintf("%d runs with %d", c, k))
			}
		}
		fmt.Fprintf(&s, "\nWorks-written observations per run (a reconcile that wrote Works): %s.\n", strings.Join(parts, ", "))
	}
	if len(b.rest) > 0 {
		fmt.Fprintf(&s, "\n### At rest, %d Works held by each member\n\n", b.opts.restWorks)
		s.WriteString(restTable(b.rest, b.opts.restWorks))
		if t := residenceTable(b.rest); t != "" {
			s.WriteString("\n" + t)
		}
	}
	if len(b.zeroDown.samples) > 0 {
		fmt.Fprintf(&s, "\n### Scale to zero and back\n\nOne Divided MyApp, static weights 1:...:1 of %d, scaled to 0 and back on each run; its member Deployments stay the same objects.\n\n", replicasPerMember*n)
		s.WriteString(table([]*series{&b.zeroDown, &b.zeroDownStatus, &b.zeroUp, &b.zeroUpStatus}))
	}
	if len(b.shiftSplit.samples) > 0 {
		s.WriteString("\n### Health shift\n\nOne Divided MyApp, static weights 8:2 of 10 over two Pull members, each with a Prometheus scraping a test gauge every 1s; signal: the gauge above 0.08, `for` 1s, evaluated every 1s; an HTTPRoute on the hub with a backendRef per member. Each run raises the first member's gauge to 0.12 and times from that moment; the scrape, the evaluation interval and `for` (about 1-3s together) are in the times.\n\n")
		s.WriteString(table([]*series{&b.shiftSplit, &b.shiftRoute, &b.shiftBack}))
	}
	if len(b.failRaw.samples) > 0 {
		s.WriteString("\n### Where failover's time goes\n\n")
		s.WriteString("The first four rows after the call add up to the raw failover time.\n\n")
		s.WriteString(table([]*series{&b.fStopCall, &b.fDisconnected, &b.fTaint, &b.fWorks, &b.fReady, &b.fNotReady, &b.fFailback}))
	}
	return s.String()
}
