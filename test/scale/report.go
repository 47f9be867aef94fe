package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/flotilla-dev/flotilla/test/scale/plot"
)

// figure is one measured value.
type figure struct {
	Scenario int     `json:"scenario"`
	Key      string  `json:"key"`
	Unit     string  `json:"unit,omitempty"`
	Value    float64 `json:"value"`
	Note     string  `json:"note,omitempty"`
}

// record is the JSON form of a run, which a later run compares with.
type record struct {
	Date    string   `json:"date"`
	Size    string   `json:"size"`
	Members int      `json:"members"`
	Apps    int      `json:"apps"`
	Machine string   `json:"machine"`
	Failed  string   `json:"failed,omitempty"`
	Figures []figure `json:"figures"`
}

type report struct {
	o       options
	started time.Time
	figures []figure
	failed  string
	// Plot data: (members Ready, hub RSS bytes), (MyApps created, hub RSS
	// bytes), (MyApps created, p50 seconds of that bucket).
	rssMembers, rssApps, latencyApps [][2]float64
}

func (r *report) add(scenario int, key, unit string, value float64, note string) {
	r.figures = append(r.figures, figure{Scenario: scenario, Key: key, Unit: unit, Value: value, Note: note})
}

var scenarioTitles = map[int]string{
	1: "members join (connect storm)",
	2: "Divided MyApps created at a fixed rate",
	3: "MyApps Duplicated to every member",
	4: "one member lost",
	5: "hub restart",
	6: "image change at once",
}

func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(load))
	l := ""
	if len(f) > 0 {
		l = ", load average " + f[0]
	}
	return fmt.Sprintf("%d cores, %s%s", runtime.NumCPU(), runtime.Version(), l)
}

func (r *report) record() record {
	return record{Date: r.started.UTC().Format(time.RFC3339), Size: r.o.size, Members: r.o.members, Apps: r.o.apps, Machine: machine(), Failed: r.failed, Figures: r.figures}
}

// markdown renders the figures as tables, one per scenario.
func (r *report) markdown() string {
	var b strings.Builder
	o := r.o
	fmt.Fprintf(&b, "## Scale: %d members, %d MyApps (%s), %s\n\n", o.members, o.apps, o.size, r.started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Machine: %s. %d agent processes, ready delay %s, heartbeat %s, hub heartbeat grace %s, toleration %ds.\n",
		machine(), o.procs, o.readyDelay, o.heartbeat, o.grace, o.toleration)
	if len(o.hubArgs) > 0 {
		fmt.Fprintf(&b, "Hub flags beside the defaults: `%s`.\n", strings.Join(o.hubArgs, " "))
	}
	if r.failed != "" {
		fmt.Fprintf(&b, "\n**FAILED:** %s\n", r.failed)
	}
	last := 0
	for _, f := range r.figures {
		if f.Scenario != last {
			last = f.Scenario
			fmt.Fprintf(&b, "\n### %d. %s\n\n| figure | value | note |\n|---|---|---|\n", f.Scenario, scenarioTitles[f.Scenario])
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", f.Key, format(f.Value, f.Unit), f.Note)
	}
	return b.String()
}

func format(v float64, unit string) string {
	var s string
	switch {
	case v == float64(int64(v)) && (unit == "" || unit == "/s" && v > 100):
		s = fmt.Sprintf("%d", int64(v))
	case v >= 100:
		s = fmt.Sprintf("%.0f", v)
	case v >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

// worseWhenHigher lists the units whose growth is a regression.
var worseWhenHigher = map[string]float64{"s": 0.5, "MiB": 8, "KiB": 8, "cores": 0.05}

// compare prints the figures beside those of the record in path and flags
// each that grew by more than 10% (and by more than a small absolute
// amount, so noise on tiny values is not flagged).
func (r *report) compare(path string) (string, error) {
	var prev record
	if err := jsonFile(path, &prev); err != nil {
		return "", fmt.Errorf("reading the record to compare with: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Compared with the run of %s (%s)\n\n", prev.Date, path)
	if prev.Members != r.o.members || prev.Apps != r.o.apps {
		fmt.Fprintf(&b, "Not comparable: that run had %d members and %d MyApps, this one %d and %d.\n", prev.Members, prev.Apps, r.o.members, r.o.apps)
		return b.String(), nil
	}
	old := map[string]figure{}
	for _, f := range prev.Figures {
		old[fmt.Sprintf("%d/%s", f.Scenario, f.Key)] = f
	}
	b.WriteString("| figure | before | now | change | |\n|---|---|---|---|---|\n")
	regressions := 0
	for _, f := range r.figures {
		p, ok := old[fmt.Sprintf("%d/%s", f.Scenario, f.Key)]
		if !ok {
			continue
		}
		change, flag := "", ""
		if p.Value != 0 {
			pct := (f.Value - p.Value) / p.Value * 100
			change = fmt.Sprintf("%+.0f%%", pct)
			if abs, ok := worseWhenHigher[f.Unit]; ok && pct > 10 && f.Value-p.Value > abs {
				flag = "REGRESSION"
				regressions++
			}
		}
		fmt.Fprintf(&b, "| %d/%s | %s | %s | %s | %s |\n", f.Scenario, f.Key, format(p.Value, p.Unit), format(f.Value, f.Unit), change, flag)
	}
	if regressions > 0 {
		fmt.Fprintf(&b, "\n%d figures regressed by more than 10%%.\n", regressions)
	} else {
		b.WriteString("\nNo figure regressed by more than 10%.\n")
	}
	return b.String(), nil
}

// write prints the report and writes the files the options ask for.
func (r *report) write(o options) error {
	text, err := r.text(o)
	fmt.Print(text)
	if err != nil {
		return err
	}
	return r.saveText(o, text)
}

// save writes the files the options ask for.
func (r *report) save(o options) error {
	text, err := r.text(o)
	if err != nil {
		return err
	}
	return r.saveText(o, text)
}

// saveText writes the files the options ask for, text as the markdown.
func (r *report) saveText(o options, text string) error {
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(text), 0o644); err != nil {
			return err
		}
	}
	if o.jsonOut != "" {
		data, err := json.MarshalIndent(r.record(), "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if o.plot != "" && r.failed == "" {
		if err := r.writePlot(o.plot); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return nil
}

// text is the markdown report, with the comparison when asked for.
func (r *report) text(o options) (string, error) {
	text := r.markdown()
	if o.compare != "" {
		c, err := r.compare(o.compare)
		if err != nil {
			text += "\n" + err.Error() + "\n"
		} else {
			text += c
		}
	}
	return text, nil
}

func series(name string, pts [][2]float64, xs, ys float64) plot.Series {
	s := plot.Series{Name: name}
	sorted := append([][2]float64(nil), pts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i][0] < sorted[j][0] })
	// At most about 40 markers: the samples come every half second.
	step := max(1, len(sorted)/40)
	for i, p := range sorted {
		if i%step == 0 || i == len(sorted)-1 {
			s.Points = append(s.Points, plot.Point{X: p[0] * xs, Y: p[1] * ys})
		}
	}
	return s
}

// writePlot draws hub RSS against members Ready (scenario 1), hub RSS
// against time in scenario 2, and convergence against MyApps created.
func (r *report) writePlot(path string) error {
	var charts []plot.Chart
	const toMiB = 1.0 / (1 << 20)
	if len(r.rssMembers) > 0 {
		charts = append(charts, plot.Chart{Title: "Hub RSS while members join", XLabel: "members Ready", YLabel: "hub RSS (MiB)",
			Series: []plot.Series{series("hub RSS", r.rssMembers, 1, toMiB)}})
	}
	if len(r.rssApps) > 0 {
		charts = append(charts, plot.Chart{Title: fmt.Sprintf("Hub RSS while %d MyApps are created and become Ready", r.o.apps), XLabel: "seconds since the first create", YLabel: "hub RSS (MiB)",
			Series: []plot.Series{series("hub RSS", r.rssApps, 1, toMiB)}})
	}
	if len(r.latencyApps) > 0 {
		charts = append(charts, plot.Chart{Title: fmt.Sprintf("Created -> Ready at %g creates/s", r.o.rate), XLabel: "MyApps created", YLabel: "p50 of the batch (s)",
			Series: []plot.Series{series("created -> Ready", r.latencyApps, 1, 1)}})
	}
	if len(charts) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := plot.Render(&buf, 0, 0, charts...); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
