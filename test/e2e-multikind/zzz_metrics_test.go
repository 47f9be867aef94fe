//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// The metrics checks run last (go test runs files in name order, and the
// scrape check waits for the independent specs, which run after it): by then
// the suite has placed, rolled out, failed over, shifted on health,
// restarted the hub and the agents, confirmed prunes and joined a member,
// with a real Prometheus scraping the hub and every agent through their
// metrics authentication all along.

// metricsFleet is a provider whose fleet a Prometheus scrapes.
type metricsFleet interface {
	FleetPrometheusURL() string
	MetricsEndpoints() []fleet.MetricsEndpoint
}

// documentedMetrics reads the metric table of docs/metrics.md (generated
// from the hub's and the agent's registries, so it is the list they serve).
func documentedMetrics(t *testing.T) []documentedMetric {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := readDocumentedMetrics(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// promValue is the value of the one series query returns, and how many
// series it returned.
func promValue(base, query string) (string, int, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", 0, err
	}
	if body.Status != "success" {
		return "", 0, fmt.Errorf("query %s: %s", query, body.Error)
	}
	if len(body.Data.Result) != 1 || len(body.Data.Result[0].Value) != 2 {
		return "", len(body.Data.Result), nil
	}
	return fmt.Sprint(body.Data.Result[0].Value[1]), 1, nil
}

// TestEveryDocumentedMetricScraped: every metric docs/metrics.md lists
// was served, by the component it names, to the suite's Prometheus, which
// scraped the hub and each agent with a ServiceAccount token authorized
// by ClusterRole flotilla-metrics-reader; every target it scrapes (the
// hub and the agents the suite started with) is up at the end.
func TestEveryDocumentedMetricScraped(t *testing.T) {
	track(t)
	mf, ok := provider.(metricsFleet)
	if !ok || mf.FleetPrometheusURL() == "" {
		t.Skipf("the %s provider runs no Prometheus of its own", provider.Name())
	}
	afterIndependentSpecs(t)
	prom := mf.FleetPrometheusURL()
	job := map[string]string{"hub": "flotilla-hub", "agent": "flotilla-agent"}
	var missing []string
	for _, m := range documentedMetrics(t) {
		comps, err := m.components()
		if err != nil {
			t.Error(err)
			continue
		}
		name := m.name
		if m.typ == "histogram" {
			name += "_count"
		}
		for _, c := range comps {
			// Present at any time of the run: a MyApp's series go when it does.
			q := fmt.Sprintf(`count(present_over_time({__name__=%q,component=%q}[3h]))`, name, job[c])
			v, n, err := promValue(prom, q)
			if err != nil {
				t.Fatalf("asking Prometheus: %v", err)
			}
			if n == 0 {
				missing = append(missing, c+" "+m.name)
				continue
			}
			t.Logf("%-55s %-6s %s series", m.name, c, v)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d documented metrics were never scraped from the component the reference names (many appear only as the suite's specs exercise them: run the whole suite):\n  %s",
			len(missing), strings.Join(missing, "\n  "))
	}
	// Every target answers now: scraped with its token, over HTTPS.
	eventually(t, "every hub and agent target up", time.Minute, func() error {
		v, n, err := promValue(prom, `count(up{component=~"flotilla-.*"} == 0) or vector(0)`)
		if err != nil {
			return err
		}
		if n != 1 || v != "0" {
			return fmt.Errorf("%s targets down", v)
		}
		for comp, min := range map[string]int{"flotilla-hub": 1, "flotilla-agent": 2} {
			v, _, err = promValue(prom, fmt.Sprintf(`count(up{component=%q} == 1)`, comp))
			if err != nil {
				return err
			}
			if n, _ := strconv.Atoi(v); n < min {
				return fmt.Errorf("%q targets of %s up, want at least %d", v, comp, min)
			}
		}
		return nil
	})
}

// TestMetricsRefuseWithoutAuthorization: the hub's and an agent's
// /metrics refuse a request without a token (401), a token of another
// cluster (401: their apiserver does not know it), and a token their
// apiserver knows but does not authorize for /metrics (403); the
// scraper's token is admitted, and the refusals disturb no scrape.
func TestMetricsRefuseWithoutAuthorization(t *testing.T) {
	track(t)
	mf, ok := provider.(metricsFleet)
	if !ok || mf.FleetPrometheusURL() == "" {
		t.Skipf("the %s provider runs no Prometheus of its own", provider.Name())
	}
	eps := mf.MetricsEndpoints()
	if len(eps) < 2 || eps[0].Process != "hub" || eps[0].Token == "" {
		t.Fatalf("want the hub's secured /metrics first and an agent's, got %+v", eps)
	}
	hub, agent := eps[0], eps[1]

	// A ServiceAccount of the hub's with no binding to the reader role.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "e2e-not-a-metrics-reader", Namespace: flotillav1.SystemNamespace}}
	if err := provider.Hub().Create(ctx, sa); err != nil {
		t.Fatalf("creating ServiceAccount %s: %v", sa.Name, err)
	}
	t.Cleanup(func() { _ = provider.Hub().Delete(context.Background(), sa) })
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}
	if err := provider.Hub().SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("requesting a token of %s: %v", sa.Name, err)
	}

	for _, c := range []struct {
		what  string
		ep    fleet.MetricsEndpoint
		token string
		want  int
	}{
		{"hub, no token", hub, "", http.StatusUnauthorized},
		{"hub, the token of " + agent.Cluster + "'s scraper", hub, agent.Token, http.StatusUnauthorized},
		{"hub, a hub token without flotilla-metrics-reader", hub, tr.Status.Token, http.StatusForbidden},
		{"hub, the scraper's token", hub, hub.Token, http.StatusOK},
		{agent.Process + ", no token", agent, "", http.StatusUnauthorized},
		{agent.Process + ", the hub scraper's token", agent, hub.Token, http.StatusUnauthorized},
		{agent.Process + ", the scraper's token", agent, agent.Token, http.StatusOK},
	} {
		code, body := fleet.GetMetrics(c.ep.Addr, c.token)
		if code != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.what, code, c.want)
			continue
		}
		if code == http.StatusOK && !strings.Contains(body, "\nflotilla_") {
			t.Errorf("%s: admitted, but no flotilla_ metric in the answer", c.what)
		}
		if code != http.StatusOK && strings.Contains(body, "flotilla_") {
			t.Errorf("%s: refused with HTTP %d, but the answer holds metrics", c.what, code)
		}
	}
	// The refusals disturbed no scrape: both targets are still up.
	for _, ep := range []fleet.MetricsEndpoint{hub, agent} {
		v, n, err := promValue(mf.FleetPrometheusURL(), fmt.Sprintf(`up{process=%q}`, ep.Process))
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || v != "1" {
			t.Errorf("after the refusals, up{process=%q} = %q (%d series), want 1", ep.Process, v, n)
		}
	}
}
