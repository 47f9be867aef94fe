package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

var (
	replicasDesc = prometheus.NewDesc("flotilla_myapp_replicas",
		"Replicas of a MyApp in a member cluster, by kind (assigned, ready).",
		[]string{"namespace", "name", "cluster", "kind"}, nil)
	trafficDesc = prometheus.NewDesc("flotilla_myapp_traffic_weight_percent",
		"Effective traffic share of a MyApp in a member cluster under its health shift, in percent.",
		[]string{"namespace", "name", "cluster"}, nil)
)

// AppSeries exports the per-cluster series of every MyApp when scraped,
// from the MyApps' status as the hub's cache holds it:
// flotilla_myapp_replicas (status.clusters: assigned and ready) and
// flotilla_myapp_traffic_weight_percent (status.traffic.clusters). Nothing
// is kept per series between scrapes and a MyApp's series go with it;
// gauges set at each reconcile held some 1 KiB per series (186 MiB for
// 100 MyApps over 1,000 members, docs/benchmarks.md, Scale) and had to be
// deleted cluster by cluster. It is a manager Runnable that runs on the
// leader only, and exports only while this replica leads, as the series
// did when the leader's reconciles set them.
type AppSeries struct {
	// Reader lists MyApps: the hub's cache. Nil exports nothing.
	Reader  client.Reader
	leading atomic.Bool
}

// Describe implements prometheus.Collector.
func (s *AppSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- replicasDesc
	ch <- trafficDesc
}

// Collect implements prometheus.Collector.
func (s *AppSeries) Collect(ch chan<- prometheus.Metric) {
	if s.Reader == nil || !s.leading.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list flotillav1.MyAppList
	if err := s.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(replicasDesc, err)
		return
	}
	for i := range list.Items {
		app := &list.Items[i]
		for _, c := range app.Status.Clusters {
			ch <- prometheus.MustNewConstMetric(replicasDesc, prometheus.GaugeValue, float64(c.Assigned), app.Namespace, app.Name, c.Name, "assigned")
			ch <- prometheus.MustNewConstMetric(replicasDesc, prometheus.GaugeValue, float64(c.ReadyReplicas), app.Namespace, app.Name, c.Name, "ready")
		}
		if t := app.Status.Traffic; t != nil {
			for _, c := range t.Clusters {
				ch <- prometheus.MustNewConstMetric(trafficDesc, prometheus.GaugeValue, float64(c.Weight), app.Namespace, app.Name, c.Name)
			}
		}
	}
}

// MetricTypes says the types of the metrics it exports (hack/metricsdoc).
func (s *AppSeries) MetricTypes() map[string]prometheus.ValueType {
	return map[string]prometheus.ValueType{
		"flotilla_myapp_replicas":               prometheus.GaugeValue,
		"flotilla_myapp_traffic_weight_percent": prometheus.GaugeValue,
	}
}

// NeedLeaderElection says it runs on the leader only.
func (s *AppSeries) NeedLeaderElection() bool { return true }

// Start exports the series until ctx ends (the manager starts it once
// this replica leads).
func (s *AppSeries) Start(ctx context.Context) error {
	s.leading.Store(true)
	<-ctx.Done()
	s.leading.Store(false)
	return nil
}
