package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// prometheusBinary is bin/prometheus ($FLOTILLA_BIN, else the repository's
// bin/), which make testbed-bin builds.
func prometheusBinary(t *testing.T) string {
	dir := os.Getenv("FLOTILLA_BIN")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin")
	}
	p, err := filepath.Abs(filepath.Join(dir, "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no Prometheus binary at %s (make testbed-bin builds it): %v", p, err)
	}
	return p
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPrometheusQuerierAgainstARealServer starts a real Prometheus on
// loopback scraping a test exporter every second and checks what the
// Querier makes of its answers: one series is a value, and it follows the
// exporter; two series, no series and a syntax error are errors that say
// so.
func TestPrometheusQuerierAgainstARealServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	latency := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flotilla_test_latency_seconds", Help: "test"}, []string{"cluster"})
	reg.MustRegister(latency)
	latency.WithLabelValues("member-1").Set(0.02)
	latency.WithLabelValues("member-2").Set(0.03)
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(exporter.Close)

	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: app\n  static_configs:\n  - targets: [%q]\n",
		strings.TrimPrefix(exporter.URL, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(prometheusBinary(t), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})

	q, err := NewPrometheus("http://"+addr, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poll := func(what, query string, want float64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var v float64
		var err error
		for time.Now().Before(deadline) {
			if v, err = q.Query(ctx, query); err == nil && v == want {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: query %q = %v, %v; want %v within 60s", what, query, v, err, want)
	}
	poll("the first scrape", `flotilla_test_latency_seconds{cluster="member-1"}`, 0.02)
	latency.WithLabelValues("member-1").Set(0.12)
	poll("the raised latency", `flotilla_test_latency_seconds{cluster="member-1"}`, 0.12)
	poll("a scalar", `scalar(flotilla_test_latency_seconds{cluster="member-2"})`, 0.03)

	for _, c := range []struct{ query, want string }{
		{`flotilla_test_latency_seconds`, "returned 2 series"},
		{`flotilla_test_latency_seconds{cluster="member-9"}`, "returned no sample"},
		{`sum(`, "bad_data"},
		{`flotilla_test_latency_seconds[1m]`, "want an instant vector"},
	} {
		if _, err := q.Query(ctx, c.query); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("query %q: error %v, want one containing %q", c.query, err, c.want)
		}
	}
}
