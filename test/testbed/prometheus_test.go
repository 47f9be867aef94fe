package testbed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// TestPrometheusScrapesExporter starts the test exporter and a real
// Prometheus scraping one of its targets every second: a gauge the test
// sets is what an instant query returns, follows a change within a few
// seconds, is not seen by a Prometheus of another target, and returns
// nothing once deleted. Stop ends the process by its PID.
func TestPrometheusScrapesExporter(t *testing.T) {
	bin := testbed.DefaultBinDir()
	if _, err := os.Stat(filepath.Join(bin, "prometheus")); err != nil {
		t.Fatalf("prometheus missing in %s: run `make testbed-bin` (%v)", bin, err)
	}
	e, err := testbed.StartExporter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the exporter: %v", err)
		}
	})
	labels := map[string]string{"cluster": "member-1"}
	e.Set("member-1", "flotilla_test_latency_seconds", labels, 0.02)
	e.Set("member-2", "flotilla_test_latency_seconds", map[string]string{"cluster": "member-2"}, 0.5)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p, err := testbed.StartPrometheus(ctx, testbed.PrometheusConfig{
		Name: "prometheus-member-1", BinDir: bin, Dir: dir,
		Targets: []testbed.ScrapeTarget{{Job: "flotilla-test", Address: e.Addr(), MetricsPath: e.Path("member-1")}},
	})
	if err != nil {
		t.Fatalf("starting Prometheus: %v", err)
	}
	pid := p.Process().Pid()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = p.Stop()
		}
	})

	query := func(q string) ([]string, error) {
		resp, err := http.Get(p.URL() + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  []any             `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return nil, err
		}
		var out []string
		for _, r := range body.Data.Result {
			out = append(out, fmt.Sprintf("%s=%v", r.Metric["cluster"], r.Value[1]))
		}
		return out, nil
	}
	is := func(q string, want ...string) func() error {
		return func() error {
			got, err := query(q)
			if err != nil {
				return err
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s = %v, want %v", q, got, want)
			}
			return nil
		}
	}
	testutil.Eventually(t, "the first scrape", time.Minute, is(`flotilla_test_latency_seconds`, "member-1=0.02"), testutil.Every(200*time.Millisecond))
	start := time.Now()
	e.Set("member-1", "flotilla_test_latency_seconds", labels, 0.12)
	testutil.Eventually(t, "the raised gauge", 10*time.Second, is(`flotilla_test_latency_seconds{cluster="member-1"}`, "member-1=0.12"), testutil.Every(100*time.Millisecond))
	t.Logf("the raised gauge showed in %s", time.Since(start).Round(time.Millisecond))
	e.Delete("member-1", "flotilla_test_latency_seconds", labels)
	testutil.Eventually(t, "the deleted gauge gone", 10*time.Second, is(`flotilla_test_latency_seconds`), testutil.Every(100*time.Millisecond))

	if err := p.Stop(); err != nil {
		t.Fatalf("stopping Prometheus: %v", err)
	}
	stopped = true
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("Prometheus (pid %d) still exists after Stop", pid)
	}
}
