package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file runs a real Prometheus (bin/prometheus, which `make
// testbed-bin` builds) for a test, and a tiny exporter whose gauges the
// test sets, so that code querying Prometheus (the agents' health-shift
// signals) sees real PromQL answers that follow what the test does.

// PrometheusConfig describes one Prometheus server.
type PrometheusConfig struct {
	// Name names the process and its log (e.g. prometheus-member-1).
	Name string
	// BinDir holds the prometheus binary (default DefaultBinDir()).
	BinDir string
	// Dir holds its configuration and storage; created if missing.
	Dir string
	// LogPath is where its output goes (default Dir/prometheus.log).
	LogPath string
	// Targets are scraped every ScrapeInterval.
	Targets []ScrapeTarget
	// ScrapeInterval is the scrape (and evaluation) interval; default 1s.
	ScrapeInterval time.Duration
}

// ScrapeTarget is one scrape job: Scheme://Address/MetricsPath.
type ScrapeTarget struct {
	// Job is the job name (and label); unique in a configuration.
	Job string
	// Address is host:port.
	Address string
	// MetricsPath is the path; default /metrics.
	MetricsPath string
	// Scheme is http (the default) or https.
	Scheme string
	// BearerTokenFile holds a token sent as Authorization: Bearer.
	BearerTokenFile string
	// InsecureSkipVerify accepts any serving certificate (https).
	InsecureSkipVerify bool
	// Labels are added to every series of the target.
	Labels map[string]string
}

// Prometheus is a running Prometheus on a loopback port.
type Prometheus struct {
	name string
	addr string
	proc *Process
}

// StartPrometheus starts a Prometheus on a free loopback port and waits
// until it is ready (/-/ready). A port that something else took in the
// meantime is replaced, up to three times.
func StartPrometheus(ctx context.Context, cfg PrometheusConfig) (*Prometheus, error) {
	if cfg.BinDir == "" {
		cfg.BinDir = DefaultBinDir()
	}
	if cfg.ScrapeInterval <= 0 {
		cfg.ScrapeInterval = time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "prometheus"
	}
	if cfg.LogPath == "" {
		cfg.LogPath = filepath.Join(cfg.Dir, "prometheus.log")
	}
	bin := filepath.Join(cfg.BinDir, "prometheus")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("prometheus binary %s not found (run `make testbed-bin`): %w", bin, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	config := filepath.Join(cfg.Dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(prometheusYAML(cfg)), 0o644); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(1)
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		proc, err := StartProcess(cfg.Name, bin, []string{
			"--config.file=" + config,
			"--storage.tsdb.path=" + filepath.Join(cfg.Dir, "data"),
			"--web.listen-address=" + addr,
			// A test's Prometheus keeps an hour; it lives for one test run.
			"--storage.tsdb.retention.time=1h",
			"--log.level=warn",
		}, nil, cfg.LogPath)
		if err != nil {
			return nil, err
		}
		err = pollHTTP(ctx, proc, "http://"+addr+"/-/ready", nil, 60*time.Second)
		if err == nil {
			return &Prometheus{name: cfg.Name, addr: addr, proc: proc}, nil
		}
		_ = proc.Stop(10 * time.Second)
		var early *exitedEarlyError
		if attempt == 3 || !errors.As(err, &early) || !early.portTaken() {
			return nil, fmt.Errorf("starting %s (log %s): %w", cfg.Name, cfg.LogPath, err)
		}
	}
}

// prometheusYAML is the configuration: every target scraped (and rules
// evaluated) every ScrapeInterval.
func prometheusYAML(cfg PrometheusConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\nscrape_configs:\n",
		cfg.ScrapeInterval, cfg.ScrapeInterval, cfg.ScrapeInterval)
	for _, t := range cfg.Targets {
		path := t.MetricsPath
		if path == "" {
			path = "/metrics"
		}
		fmt.Fprintf(&b, "- job_name: %q\n  metrics_path: %q\n", t.Job, path)
		if t.Scheme != "" {
			fmt.Fprintf(&b, "  scheme: %q\n", t.Scheme)
		}
		if t.BearerTokenFile != "" {
			fmt.Fprintf(&b, "  authorization:\n    credentials_file: %q\n", t.BearerTokenFile)
		}
		if t.InsecureSkipVerify {
			b.WriteString("  tls_config:\n    insecure_skip_verify: true\n")
		}
		fmt.Fprintf(&b, "  static_configs:\n  - targets: [%q]\n", t.Address)
		if len(t.Labels) > 0 {
			keys := make([]string, 0, len(t.Labels))
			for k := range t.Labels {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b.WriteString("    labels:\n")
			for _, k := range keys {
				fmt.Fprintf(&b, "      %s: %q\n", k, t.Labels[k])
			}
		}
	}
	return b.String()
}

// URL is where Prometheus answers, e.g. http://127.0.0.1:23456.
func (p *Prometheus) URL() string { return "http://" + p.addr }

// Process is the Prometheus process (its PID, Done).
func (p *Prometheus) Process() *Process { return p.proc }

// Stop stops the process (SIGTERM, then SIGKILL after 10s), by the PID it
// was started with.
func (p *Prometheus) Stop() error { return p.proc.Stop(10 * time.Second) }

// Exporter is an in-process HTTP server on a loopback port serving gauges
// in the Prometheus text format, one set per target: GET
// /metrics/<target> serves the gauges set for target. A test sets and
// deletes them; a Prometheus scraping the target sees the change at its
// next scrape.
type Exporter struct {
	srv  *http.Server
	addr string

	mu     sync.Mutex
	gauges map[string]map[string]float64 // target -> series ("name{labels}") -> value
}

// StartExporter serves an Exporter on a free loopback port.
func StartExporter() (*Exporter, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &Exporter{addr: l.Addr().String(), gauges: map[string]map[string]float64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics/{target}", e.serve)
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.srv.Serve(l) }()
	return e, nil
}

// Addr is the exporter's host:port.
func (e *Exporter) Addr() string { return e.addr }

// Path is the metrics path of target.
func (e *Exporter) Path(target string) string { return "/metrics/" + target }

// Set sets gauge name{labels} of target to value.
func (e *Exporter) Set(target, name string, labels map[string]string, value float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gauges[target] == nil {
		e.gauges[target] = map[string]float64{}
	}
	e.gauges[target][series(name, labels)] = value
}

// Delete removes gauge name{labels} of target: Prometheus marks the series
// stale at its next scrape, and queries for it return nothing.
func (e *Exporter) Delete(target, name string, labels map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.gauges[target], series(name, labels))
}

func series(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + `="` + labelEscaper.Replace(labels[k]) + `"`
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// labelEscaper escapes a label value of the text format.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (e *Exporter) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	lines := make([]string, 0, len(e.gauges[r.PathValue("target")]))
	for s, v := range e.gauges[r.PathValue("target")] {
		lines = append(lines, s+" "+strconv.FormatFloat(v, 'g', -1, 64))
	}
	e.mu.Unlock()
	sort.Strings(lines)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	// Untyped samples: a test exporter needs no # TYPE lines, and several
	// gauges of one name with different labels stay valid.
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// Stop stops serving.
func (e *Exporter) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.srv.Shutdown(ctx)
}
