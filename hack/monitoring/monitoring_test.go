package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"sigs.k8s.io/yaml"
)

const (
	dir  = "../../deploy/monitoring"
	root = "../.."
)

// TestGeneratedFilesAreCurrent: deploy/monitoring holds what hack/monitoring
// writes now.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	fs, err := files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range fs {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/monitoring/%s is stale; run make manifests", name)
		}
	}
}

// TestPrometheusRuleHoldsTheRuleFile: the PrometheusRule's spec is the
// plain rule file, rule for rule.
func TestPrometheusRuleHoldsTheRuleFile(t *testing.T) {
	var plain RuleFile
	readYAML(t, filepath.Join(dir, "flotilla-rules.yaml"), &plain)
	var cr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec RuleFile `json:"spec"`
	}
	readYAML(t, filepath.Join(dir, "flotilla-prometheusrule.yaml"), &cr)
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" {
		t.Errorf("PrometheusRule is %s %s", cr.APIVersion, cr.Kind)
	}
	a, _ := yaml.Marshal(plain)
	b, _ := yaml.Marshal(cr.Spec)
	if !bytes.Equal(a, b) {
		t.Errorf("the PrometheusRule's rules differ from flotilla-rules.yaml")
	}
	if n := len(alerts(plain)); n < 10 {
		t.Errorf("%d alerts, want at least 10", n)
	}
	for _, r := range alerts(plain) {
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[k] == "" {
				t.Errorf("alert %s has no %s", r.Alert, k)
			}
		}
		if !strings.HasPrefix(r.Annotations["runbook_url"], runbookBase) {
			t.Errorf("alert %s: runbook %q is not a docs/troubleshooting.md anchor", r.Alert, r.Annotations["runbook_url"])
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q", r.Alert, s)
		}
	}
}

func alerts(rf RuleFile) []Rule {
	var out []Rule
	for _, g := range rf.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// promtool is bin/promtool, built by make prometheus-bin.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(root, "bin", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("bin/promtool is missing (%v); run make prometheus-bin", err)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules: promtool accepts the rule file and the unit tests of
// deploy/monitoring/tests pass.
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	run(t, pt, "check", "rules", "flotilla-rules.yaml")
	tests, err := filepath.Glob(filepath.Join(dir, "tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests in deploy/monitoring/tests (%v)", err)
	}
	for i := range tests {
		tests[i], _ = filepath.Rel(dir, tests[i])
	}
	out := run(t, pt, append([]string{"test", "rules"}, tests...)...)
	t.Log(out)
}

// promtoolTests is what the test files say about each alert.
type promtoolTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertIsTestedBothWays: each alert has a promtool case where it
// fires and one where it does not.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	paths, _ := filepath.Glob(filepath.Join(dir, "tests", "*.yaml"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var pt promtoolTests
		if err := yaml.Unmarshal(data, &pt); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, tc := range pt.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	for _, r := range alerts(Rules()) {
		if !fires[r.Alert] {
			t.Errorf("no promtool test where %s fires", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("no promtool test where %s does not fire", r.Alert)
		}
	}
}

// documented reads the metrics reference: metric name -> type.
func documented(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `flotilla_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 6 {
			t.Fatalf("docs/metrics.md: malformed row %q", line)
		}
		out[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[3])
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md lists no metric")
	}
	return out
}

var metricRef = regexp.MustCompile(`\bflotilla_[a-zA-Z0-9_]+`)

// checkMetrics fails for each metric expr names that docs/metrics.md does
// not list; it returns how many it found.
func checkMetrics(t *testing.T, docs map[string]string, where, expr string) int {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	for _, m := range refs {
		if _, ok := docs[m]; ok {
			continue
		}
		base := ""
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && docs[b] == "histogram" {
				base = b
			}
		}
		if base == "" {
			t.Errorf("%s: metric %s is not in docs/metrics.md (query %s)", where, m, expr)
		}
	}
	return len(refs)
}

// TestAlertsUseDocumentedMetrics: every alert expression names only
// metrics of docs/metrics.md.
func TestAlertsUseDocumentedMetrics(t *testing.T) {
	docs := documented(t)
	for _, r := range alerts(Rules()) {
		if checkMetrics(t, docs, "alert "+r.Alert, r.Expr) == 0 {
			t.Errorf("alert %s names no Flotilla metric: %s", r.Alert, r.Expr)
		}
	}
}

// TestDashboard: the dashboard JSON parses strictly into the Grafana
// Foundation SDK's dashboard type; it has the four sections and the
// cluster, namespace and name variables; every panel has a Prometheus
// query; every metric a query or variable names is in docs/metrics.md;
// and every query parses as PromQL (promtool checks them as recording
// rules, with the dashboard's variables filled in).
func TestDashboard(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	data, err := os.ReadFile(filepath.Join(dir, "flotilla-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard.Dashboard
	// The SDK's UnmarshalJSONStrict cannot be used: its panels' strict
	// decoding returns an empty cog.BuildErrors (a non-nil error) on
	// success and so stops at the first panel.
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("the dashboard does not parse as a Grafana dashboard: %v", err)
	}
	if d.Uid == nil || *d.Uid != "flotilla-overview" || d.Title == nil {
		t.Fatalf("dashboard uid %v title %v", d.Uid, d.Title)
	}
	docs := documented(t)
	var rows []string
	var exprs []string
	panels := 0
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			if p.RowPanel.Title != nil {
				rows = append(rows, *p.RowPanel.Title)
			}
			continue
		}
		if p.Panel == nil {
			t.Fatal("a panel that is neither a panel nor a row")
		}
		panels++
		title := ""
		if p.Panel.Title != nil {
			title = *p.Panel.Title
		}
		if len(p.Panel.Targets) == 0 {
			t.Errorf("panel %q has no query", title)
		}
		for _, target := range p.Panel.Targets {
			q, ok := target.(*prometheus.Dataquery)
			if !ok {
				t.Errorf("panel %q: a %T query, want Prometheus", title, target)
				continue
			}
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", title)
				continue
			}
			if checkMetrics(t, docs, fmt.Sprintf("panel %q", title), q.Expr) == 0 {
				t.Errorf("panel %q: query names no Flotilla metric: %s", title, q.Expr)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	if panels < 20 {
		t.Errorf("%d panels", panels)
	}
	for _, want := range []string{"Fleet overview", "Member $cluster", "MyApp $namespace/$name", "Propagation latency"} {
		if !slices.Contains(rows, want) {
			t.Errorf("no row %q (rows %v)", want, rows)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Query != nil && v.Query.String != nil {
			checkMetrics(t, docs, "variable "+v.Name, *v.Query.String)
		}
	}
	for _, want := range []string{"datasource", "cluster", "namespace", "name"} {
		if !vars[want] {
			t.Errorf("no variable %s", want)
		}
	}

	// PromQL syntax: the queries as recording rules, for promtool.
	fill := strings.NewReplacer("$__rate_interval", "5m", "$cluster", "member-1", "$namespace", "default", "$name", "web")
	var rec strings.Builder
	rec.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		fmt.Fprintf(&rec, "  - record: dashboard:query%d\n    expr: %q\n", i, fill.Replace(e))
	}
	tmp := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(tmp, []byte(rec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool(t), "check", "rules", tmp)
}

// TestRunbooksExist: every alert's runbook_url points at a section of
// docs/troubleshooting.md that exists (GitHub's anchor of its heading).
func TestRunbooksExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[githubAnchor(h)] = true
		}
	}
	const prefix = "https://github.com/flotilla-dev/flotilla/blob/main/docs/troubleshooting.md#"
	n := 0
	for _, r := range alerts(Rules()) {
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, prefix)
		if !ok {
			t.Errorf("alert %s: runbook_url %q is not a section of docs/troubleshooting.md", r.Alert, url)
			continue
		}
		if !anchors[anchor] {
			t.Errorf("alert %s: docs/troubleshooting.md has no section #%s (it has %v)", r.Alert, anchor, slices.Sorted(maps.Keys(anchors)))
		}
		n++
	}
	if n == 0 {
		t.Fatal("no alert has a runbook_url")
	}
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces
// to hyphens, punctuation other than hyphens and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
