package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPushVsPull(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		push, pull []time.Duration
		want       string
	}{
		{"no push samples", nil, ms(10, 20), ""},
		{"no pull samples", ms(10), nil, ""},
		{"push slower", ms(30, 40, 50), ms(10, 20, 20, 30),
			"push vs pull: propagation p50 40 ms to the Push members against 20 ms to the Pull members (+20 ms, 2.00x); p99 50 ms against 30 ms; 3 and 4 samples"},
		{"push faster", ms(5, 5), ms(10, 10),
			"push vs pull: propagation p50 5.0 ms to the Push members against 10 ms to the Pull members (-5.0 ms, 0.50x); p99 5.0 ms against 10 ms; 2 and 2 samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pushVsPull(tc.push, tc.pull); got != tc.want {
				t.Errorf("pushVsPull:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestCompareFlagsRegressions: a figure more than 10 % and more than the
// floor worse (at p50 or p99) is a REGRESSION; a small or tiny change,
// an improvement and a figure only one run has are not; a JSON record
// reads back as written.
func TestCompareFlagsRegressions(t *testing.T) {
	prev := record{Commit: "aaa", Started: "then", Figures: map[string]recordFigure{
		"prop":      {Unit: "ms", P50: 40, P90: 50, P99: 60, Runs: 30},
		"p99 only":  {Unit: "ms", P50: 40, P90: 50, P99: 60, Runs: 30},
		"small":     {Unit: "ms", P50: 40, P90: 50, P99: 60, Runs: 30},
		"tiny":      {Unit: "ms", P50: 1, P90: 1, P99: 1, Runs: 30},
		"better":    {Unit: "ms", P50: 40, P90: 50, P99: 60, Runs: 30},
		"agent rss": {Unit: "MiB", P50: 40},
		"gone":      {Unit: "ms", P50: 1},
	}}
	cur := record{Commit: "bbb", Started: "now", Figures: map[string]recordFigure{
		"prop":      {Unit: "ms", P50: 45, P90: 50, P99: 60, Runs: 30}, // +12.5 %, +5 ms
		"p99 only":  {Unit: "ms", P50: 40, P90: 50, P99: 70, Runs: 30}, // p99 +17 %
		"small":     {Unit: "ms", P50: 43, P90: 50, P99: 65, Runs: 30}, // +7.5 %, +8 %
		"tiny":      {Unit: "ms", P50: 1.9, P90: 1, P99: 1.9, Runs: 30},
		"better":    {Unit: "ms", P50: 20, P90: 30, P99: 40, Runs: 30},
		"agent rss": {Unit: "MiB", P50: 46},
		"new":       {Unit: "ms", P50: 100},
	}}
	out := compare(prev, cur)
	for _, name := range []string{"prop", "p99 only", "agent rss"} {
		if !rowHas(out, name, "REGRESSION") {
			t.Errorf("%q is not flagged:\n%s", name, out)
		}
	}
	for _, name := range []string{"small", "tiny", "better"} {
		if rowHas(out, name, "REGRESSION") {
			t.Errorf("%q is flagged:\n%s", name, out)
		}
	}
	for _, name := range []string{"gone", "new"} {
		if rowHas(out, name, "") {
			t.Errorf("%q is in only one record but has a row:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "3 of 6 figures in common regressed") {
		t.Errorf("no or a wrong count:\n%s", out)
	}

	path := filepath.Join(t.TempDir(), "bench.json")
	if err := writeRecord(path, cur); err != nil {
		t.Fatal(err)
	}
	back, err := readRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cur) {
		t.Errorf("record read back differs:\n got %+v\nwant %+v", back, cur)
	}
}

// rowHas says whether out has a table row for figure name containing s.
func rowHas(out, name, s string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| "+name+" |") && strings.Contains(line, s) {
			return true
		}
	}
	return false
}
