// The record: every figure of a run as JSON (-json), and the comparison of
// a run with a recorded one (-compare), which flags each figure that got
// worse by more than regressionShare (and more than a small absolute
// amount, so that a 1 ms figure moving by 0.2 ms is not called one).

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// record is a run's figures.
type record struct {
	Commit  string `json:"commit"`
	Started string `json:"started"`
	// Figures by name: latencies in milliseconds, memory in MiB.
	Figures map[string]recordFigure `json:"figures"`
}

// recordFigure is one figure. A memory figure has only P50 (its value).
type recordFigure struct {
	Unit string  `json:"unit"` // "ms" or "MiB"
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90,omitempty"`
	P99  float64 `json:"p99,omitempty"`
	Runs int     `json:"runs,omitempty"`
}

// regressionShare is how much worse than the record a figure may get
// before the comparison calls it a regression; the absolute floors keep
// noise on tiny figures out.
const (
	regressionShare = 0.10
	regressionMinMs = 2.0
	regressionMinMi = 1.0
)

// record collects the run's figures.
func (b *bench) record(mach machine) record {
	r := record{Commit: mach.commit, Started: mach.started.UTC().Format(time.RFC3339), Figures: map[string]recordFigure{}}
	all := []*series{&b.prop, &b.propReady, &b.status, &b.spec, &b.failRaw, &b.failNet, &b.direct, &b.directReady,
		&b.worksSeen, &b.worksWritten, &b.beforeWrite, &b.workToDeploy, &b.lastWorkToLastDeploy, &b.queueWait, &b.sendLatency, &b.agentApply,
		&b.statusWorks, &b.statusApp, &b.statusLatency, &b.statusWrite, &b.statusFloor, &b.zeroDown, &b.zeroDownStatus, &b.zeroUp, &b.zeroUpStatus, &b.shiftSplit, &b.shiftRoute, &b.shiftBack}
	for _, m := range b.members {
		all = append(all, b.propMember[m], b.statusMember[m])
	}
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, s := range all {
		if len(s.samples) == 0 {
			continue
		}
		r.Figures[s.name] = recordFigure{Unit: "ms", Runs: len(s.samples),
			P50: msOf(percentile(s.samples, 50)), P90: msOf(percentile(s.samples, 90)), P99: msOf(percentile(s.samples, 99))}
	}
	for _, p := range b.rest {
		// By role, not replica name, so that records of fleets whose
		// replica names or leaders differ still compare; standbys hold
		// nothing worth a record.
		if p.role != "" {
			r.Figures["at rest: RSS of "+p.role] = recordFigure{Unit: "MiB", P50: mibOf(p.rss)}
			r.Figures["at rest: anonymous memory of "+p.role] = recordFigure{Unit: "MiB", P50: mibOf(p.anon)}
		}
	}
	return r
}

func writeRecord(path string, r record) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The figures' names hold "->": kept as they are, not as \u003e.
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func readRecord(path string) (record, error) {
	var r record
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// compare renders the run against the recorded one: each figure both
// have, its p50 and p99 then and now, and REGRESSION where one of them
// grew by more than regressionShare and the floor.
func compare(prev, cur record) string {
	var names []string
	for n := range cur.Figures {
		if _, ok := prev.Figures[n]; ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var s strings.Builder
	fmt.Fprintf(&s, "Against the recorded run (commit %s, %s): a figure whose p50 or p99 grew by more than %.0f %% (and more than %.0f ms or %.0f MiB) says REGRESSION.\n\n",
		prev.Commit, prev.Started, regressionShare*100, regressionMinMs, regressionMinMi)
	s.WriteString("| figure | recorded p50 / p99 | now p50 / p99 | p50 change | |\n|---|---:|---:|---:|---|\n")
	regressions := 0
	for _, n := range names {
		p, c := prev.Figures[n], cur.Figures[n]
		verdict := ""
		if worse(p.P50, c.P50, c.Unit) || worse(p.P99, c.P99, c.Unit) {
			verdict = "REGRESSION"
			regressions++
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s |\n", n, pair(p), pair(c), change(p.P50, c.P50), verdict)
	}
	if len(names) == 0 {
		s.WriteString("| (no figure in common) | | | | |\n")
	}
	fmt.Fprintf(&s, "\n%d of %d figures in common regressed.\n", regressions, len(names))
	return s.String()
}

// worse says whether now is a regression against then.
func worse(then, now float64, unit string) bool {
	if then <= 0 || now <= then {
		return false
	}
	floor := regressionMinMs
	if unit == "MiB" {
		floor = regressionMinMi
	}
	return now-then > floor && (now-then)/then > regressionShare
}

func pair(f recordFigure) string {
	if f.Unit == "MiB" {
		return fmt.Sprintf("%.1f MiB", f.P50)
	}
	return fmt.Sprintf("%s / %s", msF(f.P50), msF(f.P99))
}

func msF(v float64) string { return ms(time.Duration(v * float64(time.Millisecond))) }

func change(then, now float64) string {
	if then <= 0 {
		return "-"
	}
	d := (now - then) / then * 100
	if math.Abs(d) < 0.5 {
		return "0 %"
	}
	return fmt.Sprintf("%+.0f %%", d)
}
