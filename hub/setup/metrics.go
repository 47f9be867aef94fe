package setup

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/hub/internal/controllers/membercluster"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	"github.com/flotilla-dev/flotilla/hub/internal/push"
	"github.com/flotilla-dev/flotilla/internal/promreg"
	"github.com/flotilla-dev/flotilla/internal/reexec"
	"github.com/flotilla-dev/flotilla/pkg/idlemem"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// MetricCollectors are every Flotilla metric a hub process serves: those
// its packages register at init and those a hub registers when built
// (sync server, push engine, certificate expiry, heartbeat ages). They are
// fresh or shared collectors whose Describe works, for the metrics
// reference (hack/metricsdoc).
func MetricCollectors() []prometheus.Collector {
	var out []prometheus.Collector
	out = append(out, metrics.Collectors()...)
	out = append(out, membercluster.Collectors()...)
	out = append(out, syncserver.MetricCollectors()...)
	out = append(out, push.MetricCollectors()...)
	out = append(out, idlemem.Collectors()...)
	out = append(out, reexec.Collectors()...)
	out = append(out, &expiryCollector{}, &metrics.AppSeries{})
	return out
}

// addHubMetrics registers the metrics a hub computes from its own state
// (the members' heartbeat ages, the MyApps' per-cluster series) on opts.Registerer, else
// controller-runtime's registry, and runs the leader gauge.
func addHubMetrics(mgr manager.Manager, opts Options, hub *Hub) error {
	// Another hub in this process (tests): the newest is described.
	if err := promreg.Replace(registererOf(opts.Registerer), &membercluster.HeartbeatCollector{Tracker: hub.Tracker}); err != nil {
		return err
	}
	if err := promreg.Replace(registererOf(opts.Registerer), reexec.Collectors()...); err != nil {
		return err
	}
	series := &metrics.AppSeries{Reader: mgr.GetCache()}
	if err := promreg.Replace(registererOf(opts.Registerer), series); err != nil {
		return err
	}
	if err := mgr.Add(series); err != nil {
		return err
	}
	return mgr.Add(hubLeaderGauge{})
}

// hubLeaderGauge sets flotilla_hub_leader to 1 while this replica leads:
// the manager starts it once elected (at once without leader election),
// and a replica that loses its lease starts over (internal/reexec).
type hubLeaderGauge struct{}

func (hubLeaderGauge) NeedLeaderElection() bool { return true }

func (hubLeaderGauge) Start(ctx context.Context) error {
	metrics.HubLeader.Set(1)
	<-ctx.Done()
	metrics.HubLeader.Set(0)
	return nil
}

// registererOf is reg, or controller-runtime's registry (which the hub's
// /metrics serves) when reg is nil.
func registererOf(reg prometheus.Registerer) prometheus.Registerer {
	if reg == nil {
		return ctrlmetrics.Registry
	}
	return reg
}
