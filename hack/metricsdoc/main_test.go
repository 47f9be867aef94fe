package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReferenceIsCurrent: docs/metrics.md is what metricsdoc writes now.
func TestReferenceIsCurrent(t *testing.T) {
	want, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/metrics.md is stale; run make manifests")
	}
}

// metricName finds a metric's name where the code declares one: a
// prometheus Opts Name or a NewDesc.
var metricName = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(flotilla_[a-z0-9_]+)"`)

// TestEveryDeclaredMetricIsListed: every flotilla_* metric declared in the
// hub's and the agent's code (agent/, hub/, pkg/) is in the reference, so
// a metric registered outside MetricCollectors cannot go unlisted.
func TestEveryDeclaredMetricIsListed(t *testing.T) {
	doc, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `flotilla_") {
			listed[strings.Trim(strings.Fields(line)[1], "`")] = true
		}
	}
	if len(listed) < 40 {
		t.Fatalf("only %d metrics listed", len(listed))
	}
	for _, dir := range []string{"agent", "hub", "pkg"} {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range metricName.FindAllStringSubmatch(string(src), -1) {
				if !listed[m[1]] {
					t.Errorf("%s declares metric %s, which docs/metrics.md does not list: add its collector to hub/setup.MetricCollectors or agent/setup.MetricCollectors", path, m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
