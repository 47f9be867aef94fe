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
