package server

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// clusterCounters are the sync server's per-cluster counters: Works
// orphaned, connects limited and status parts clamped (one per
// clampWhats). A CounterVec keeps a whole metric per series (its label
// pairs, description and map entry), some 600 bytes each; at 17 series
// per member that was about 10 KiB of hub memory per connected agent, the
// largest part after the connection's own buffers. Here a cluster costs
// one small array of atomics, and the series are made at scrape time.
//
// The series are the same: a cluster's exist, at zero, from its first
// accepted stream (init), or from the first increment of one that never
// got that far (a limited connect), until its MemberCluster is gone
// (forget).
type clusterCounters struct {
	orphaned, limited, clamped *prometheus.Desc

	mu       sync.RWMutex
	clusters map[string]*clusterCounts
}

// clusterCounts is one cluster's values.
type clusterCounts struct {
	orphaned, limited atomic.Uint64
	clamped           [len(clampWhats)]atomic.Uint64
}

// clampIndex is the position of each clampWhats value.
var clampIndex = func() map[string]int {
	m := make(map[string]int, len(clampWhats))
	for i, w := range clampWhats {
		m[w] = i
	}
	return m
}()

func newClusterCounters(orphaned, limited, clamped *prometheus.Desc) *clusterCounters {
	return &clusterCounters{orphaned: orphaned, limited: limited, clamped: clamped, clusters: map[string]*clusterCounts{}}
}

// get returns cluster's counts, made at zero if it has none.
func (c *clusterCounters) get(cluster string) *clusterCounts {
	c.mu.RLock()
	n := c.clusters[cluster]
	c.mu.RUnlock()
	if n != nil {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n = c.clusters[cluster]; n == nil {
		n = &clusterCounts{}
		c.clusters[cluster] = n
	}
	return n
}

func (c *clusterCounters) init(cluster string) { c.get(cluster) }

func (c *clusterCounters) forget(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.clusters, cluster)
}

func (c *clusterCounters) incOrphaned(cluster string) { c.get(cluster).orphaned.Add(1) }
func (c *clusterCounters) incLimited(cluster string)  { c.get(cluster).limited.Add(1) }

// addClamped counts n parts of kind what cut from cluster's reports.
// Every what is one of the clamp constants, all in clampWhats (the clamp
// tests count each); an agent's input never names one.
func (c *clusterCounters) addClamped(cluster, what string, n int) {
	i, ok := clampIndex[what]
	if !ok {
		return
	}
	c.get(cluster).clamped[i].Add(uint64(n))
}

// Describe implements prometheus.Collector.
func (c *clusterCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.orphaned
	ch <- c.limited
	ch <- c.clamped
}

// Collect implements prometheus.Collector.
func (c *clusterCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for cluster, n := range c.clusters {
		ch <- prometheus.MustNewConstMetric(c.orphaned, prometheus.CounterValue, float64(n.orphaned.Load()), cluster)
		ch <- prometheus.MustNewConstMetric(c.limited, prometheus.CounterValue, float64(n.limited.Load()), cluster)
		for i, what := range clampWhats {
			ch <- prometheus.MustNewConstMetric(c.clamped, prometheus.CounterValue, float64(n.clamped[i].Load()), cluster, what)
		}
	}
}

// MetricTypes says the type of each metric (for the metrics reference).
func (c *clusterCounters) MetricTypes() map[string]prometheus.ValueType {
	return map[string]prometheus.ValueType{
		"flotilla_sync_works_orphaned_total":   prometheus.CounterValue,
		"flotilla_sync_connects_limited_total": prometheus.CounterValue,
		"flotilla_sync_status_clamped_total":   prometheus.CounterValue,
	}
}
