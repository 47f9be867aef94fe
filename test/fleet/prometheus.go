package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/flotilla-dev/flotilla/test/testbed"
)

// A member's Prometheus, on demand: the health-shift signals of type
// Prometheus are PromQL queries the agent evaluates against its member's
// Prometheus (--prometheus-url). The fleet can give Pull members one each:
// a real Prometheus on a loopback port, its storage in the fleet's folder,
// scraping every second the fleet's test exporter, an in-process HTTP
// server whose gauges a test sets per member (SetGauge). Each member's
// Prometheus scrapes only that member's gauges (the exporter's
// /metrics/<member>), as a cluster's own Prometheus sees only its own
// workloads. None of it runs unless asked for (Config.Prometheus, or
// StartPrometheus).

// prometheusJob is the scrape job of the test exporter.
const prometheusJob = "flotilla-test"

// StartPrometheus gives each member a Prometheus, unless it has one, and
// starts the member's agents again with --prometheus-url pointing at it,
// one replica after the other (a SIGTERMed leader releases its Lease, so a
// standby takes over meanwhile). It returns once every Prometheus has
// scraped the exporter and an agent of every member leads again. Members
// in Push mode have no agent to query a Prometheus, and are refused.
func (f *Fleet) StartPrometheus(ctx context.Context, members ...string) error {
	for _, m := range members {
		if f.PrometheusURL(m) != "" {
			continue
		}
		if err := f.startPrometheus(ctx, m); err != nil {
			return err
		}
		if err := f.restartAgents(ctx, m); err != nil {
			return fmt.Errorf("starting the agents of %s again with --prometheus-url: %w", m, err)
		}
	}
	return nil
}

// StopPrometheus starts the members' agents again without
// --prometheus-url, then stops their Prometheus servers (by the PID they
// were started with). Members without one are left alone.
func (f *Fleet) StopPrometheus(ctx context.Context, members ...string) error {
	var errs []error
	for _, m := range members {
		f.mu.Lock()
		p := f.prometheus[m]
		delete(f.prometheus, m)
		f.mu.Unlock()
		if p == nil {
			continue
		}
		if err := f.restartAgents(ctx, m); err != nil {
			errs = append(errs, fmt.Errorf("starting the agents of %s again without --prometheus-url: %w", m, err))
		}
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

// PrometheusURL is member's Prometheus ("" when it has none).
func (f *Fleet) PrometheusURL(member string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.prometheus[member]; p != nil {
		return p.URL()
	}
	return ""
}

// SetGauge sets the gauge name{cluster="<member>"} that member's
// Prometheus scrapes to value; its next scrape (within a second) sees it.
// It may be set before the member has a Prometheus.
func (f *Fleet) SetGauge(member, name string, value float64) error {
	e, err := f.testExporter()
	if err != nil {
		return err
	}
	e.Set(member, name, map[string]string{"cluster": member}, value)
	return nil
}

// DeleteGauge removes the gauge name{cluster="<member>"}: once scraped,
// queries for it return nothing.
func (f *Fleet) DeleteGauge(member, name string) error {
	e, err := f.testExporter()
	if err != nil {
		return err
	}
	e.Delete(member, name, map[string]string{"cluster": member})
	return nil
}

// testExporter is the fleet's exporter, started the first time.
func (f *Fleet) testExporter() (*testbed.Exporter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exporter == nil {
		e, err := testbed.StartExporter()
		if err != nil {
			return nil, fmt.Errorf("starting the test exporter: %w", err)
		}
		f.exporter = e
	}
	return f.exporter, nil
}

// startPrometheus starts member's Prometheus (and the exporter, the
// first time) and waits until it has scraped the exporter.
func (f *Fleet) startPrometheus(ctx context.Context, member string) error {
	if f.push[member] {
		return fmt.Errorf("%s runs in Push mode: it has no agent to query a Prometheus", member)
	}
	e, err := f.testExporter()
	if err != nil {
		return err
	}
	name := "prometheus-" + member
	p, err := testbed.StartPrometheus(ctx, testbed.PrometheusConfig{
		Name:    name,
		BinDir:  f.cfg.BinDir,
		Dir:     filepath.Join(f.cfg.Dir, "prometheus", member),
		LogPath: f.logPath(name),
		Targets: []testbed.ScrapeTarget{{Job: prometheusJob, Address: e.Addr(), MetricsPath: e.Path(member)}},
	})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.prometheus[member] = p
	f.mu.Unlock()
	f.logf("%s: Prometheus at %s (pid %d) scraping %s%s every second", member, p.URL(), p.Process().Pid(), e.Addr(), e.Path(member))
	return waitScraped(ctx, p.URL(), time.Minute)
}

// waitScraped waits until the Prometheus at base has scraped the test
// exporter: up{job="flotilla-test"} is 1.
func waitScraped(ctx context.Context, base string, timeout time.Duration) error {
	return waitUp(ctx, base, `up{job="`+prometheusJob+`"}`, timeout)
}

// waitUp waits until the Prometheus at base answers query (an up series)
// with one series of value 1: it scraped that target successfully.
func waitUp(ctx context.Context, base, query string, timeout time.Duration) error {
	c := http.Client{Timeout: 2 * time.Second}
	q := base + "/api/v1/query?query=" + url.QueryEscape(query)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		resp, err := c.Get(q)
		if err == nil {
			var body struct {
				Data struct {
					Result []struct {
						Value []any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err == nil && len(body.Data.Result) == 1 && len(body.Data.Result[0].Value) == 2 && body.Data.Result[0].Value[1] == "1" {
				return nil
			}
			last = fmt.Sprintf("%+v (%v)", body.Data.Result, err)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Prometheus at %s has not scraped its target after %s: %s = %s", base, timeout, query, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// restartAgents replaces member's agent processes one after the other
// with new ones (same names, the current flags) and waits until one of
// the new ones leads.
func (f *Fleet) restartAgents(ctx context.Context, member string) error {
	f.mu.Lock()
	n := len(f.agents[member])
	f.mu.Unlock()
	for i := range n {
		f.mu.Lock()
		old := f.agents[member][i]
		f.mu.Unlock()
		if err := old.Stop(); err != nil {
			return err
		}
		next, err := f.superviseAgent(member, i)
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.agents[member][i] = next
		f.mu.Unlock()
	}
	if n == 0 {
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := f.AgentLeader(member)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after restarting its agents: %w (logs in %s)", err, f.LogDir())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stopAllPrometheus stops every member's Prometheus and the exporter (the
// agents are stopped already).
func (f *Fleet) stopAllPrometheus() error {
	f.mu.Lock()
	proms := f.prometheus
	f.prometheus = map[string]*testbed.Prometheus{}
	e := f.exporter
	f.exporter = nil
	f.mu.Unlock()
	var errs []error
	for _, p := range proms {
		errs = append(errs, p.Stop())
	}
	f.mu.Lock()
	fp := f.fleetProm
	f.fleetProm = nil
	f.mu.Unlock()
	if fp != nil {
		errs = append(errs, fp.Stop())
	}
	if e != nil {
		errs = append(errs, e.Stop())
	}
	return errors.Join(errs...)
}
