// Health shift: one Divided MyApp, static weights 8:2 of 10 over the
// first two Pull members, with a Prometheus signal on a gauge of the
// fleet's test exporter (threshold 0.08, for 1s, interval 1s) and an
// HTTPRoute on the hub. Each run raises member-1's gauge to 0.12 and times,
// from that moment, the member Deployments at 2 and 8 (the new split
// applied) and the route's weights at 20 / 80; then lowers it to 0.02 and
// waits for the split to come back after the recovery window.
//
// What the times hold: the scrape (every 1s), the agent's evaluation
// (every 1s), `for` (1s) and the way back to the members; so about 1s of
// them is the policy's own wait, and the rest is sampling and Flotilla.

package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// The health-shift run's settings.
const (
	shiftGauge    = "flotilla_bench_latency_seconds"
	shiftFor      = time.Second
	shiftRecovery = 2 * time.Second
)

// shiftMembers are the first two Pull members (the signal needs an agent
// with a Prometheus).
func (b *bench) shiftMembers() ([]string, error) {
	var out []string
	for _, m := range b.members {
		if b.f.SyncMode(m) != flotillav1.SyncModePush {
			out = append(out, m)
		}
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("the health-shift runs need two Pull members, the fleet has %v", out)
	}
	return out[:2], nil
}

func (b *bench) shiftApp(name string, members []string) *flotillav1.MyApp {
	return &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: flotillav1.MyAppSpec{
			Image:    imageV1,
			Replicas: ptr.To(int32(10)),
			Placement: flotillav1.Placement{
				ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: members},
				ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
					ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
					ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
					WeightPreference: &flotillav1.ClusterPreferences{StaticWeightList: []flotillav1.StaticClusterWeight{
						{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: members[:1]}, Weight: 8},
						{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: members[1:]}, Weight: 2},
					}},
				},
				HealthShift: &flotillav1.HealthShift{
					Signals: []flotillav1.HealthSignal{{
						Name: "latency", Type: flotillav1.SignalPrometheus,
						Query: shiftGauge + `{cluster="${cluster}"}`, Threshold: resource.MustParse("0.08"),
					}},
					For:            &metav1.Duration{Duration: shiftFor},
					Interval:       &metav1.Duration{Duration: time.Second},
					RecoveryWindow: &metav1.Duration{Duration: shiftRecovery},
				},
			},
			Traffic: &flotillav1.TrafficSpec{HTTPRoute: &flotillav1.HTTPRouteTraffic{Name: name, Backends: []flotillav1.ClusterBackend{
				{Cluster: members[0], BackendName: "web-" + members[0]},
				{Cluster: members[1], BackendName: "web-" + members[1]},
			}}},
		},
	}
}

// split is true when member Deployments name have the replicas of want.
func (b *bench) split(name string, want map[string]int32) func(*observer) bool {
	return func(o *observer) bool {
		for m, r := range want {
			d := o.deploys[m][name]
			if d == nil || d.Spec.Replicas == nil || *d.Spec.Replicas != r {
				return false
			}
		}
		return true
	}
}

// routeAt polls HTTPRoute name every 5ms until its backendRefs carry want
// (by backend name) and returns when it first saw them.
func (b *bench) routeAt(ctx context.Context, name string, want map[string]int32) (time.Time, error) {
	var last map[string]int32
	err := poll(ctx, b.opts.timeout, "HTTPRoute "+name+" weights", func() (string, error) {
		r := &gatewayv1.HTTPRoute{}
		if err := b.f.Hub.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: name}, r); err != nil {
			return err.Error(), nil
		}
		last = map[string]int32{}
		for _, rule := range r.Spec.Rules {
			for _, ref := range rule.BackendRefs {
				if ref.Weight != nil {
					last[string(ref.Name)] = *ref.Weight
				}
			}
		}
		for k, v := range want {
			if last[k] != v {
				return fmt.Sprintf("weights %v, want %v", last, want), nil
			}
		}
		return "", nil
	})
	return time.Now(), err
}

// healthShift runs the health-shift figures: one warm-up run, then
// opts.shiftRuns counted runs.
func (b *bench) healthShift(ctx context.Context) error {
	members, err := b.shiftMembers()
	if err != nil {
		return err
	}
	m1, m2 := members[0], members[1]
	for _, m := range members {
		if err := b.f.SetGauge(m, shiftGauge, 0.02); err != nil {
			return err
		}
	}
	progress("starting a Prometheus for %s and %s (their agents restart with --prometheus-url)", m1, m2)
	if err := b.f.StartPrometheus(ctx, members...); err != nil {
		return err
	}
	defer func() {
		if err := b.f.StopPrometheus(context.Background(), members...); err != nil {
			progress("stopping the Prometheus servers: %v", err)
		}
	}()
	crd, err := testutil.HTTPRouteCRD()
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(b.f.HubConfig, envtest.CRDInstallOptions{Paths: []string{crd}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing the HTTPRoute CRD on the hub: %w", err)
	}
	if err := b.waitQuiet(ctx, "health shift"); err != nil {
		return err
	}
	const name = "shift"
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{
			{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName("web-" + m1), Port: ptr.To(gatewayv1.PortNumber(80))}}},
			{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName("web-" + m2), Port: ptr.To(gatewayv1.PortNumber(80))}}},
		}}}},
	}
	if err := b.f.Hub.Create(ctx, route); err != nil {
		return fmt.Errorf("creating HTTPRoute %s: %w", name, err)
	}
	normal := map[string]int32{m1: 8, m2: 2}
	cut := map[string]int32{m1: 2, m2: 8}
	normalRoute := map[string]int32{"web-" + m1: 80, "web-" + m2: 20}
	cutRoute := map[string]int32{"web-" + m1: 20, "web-" + m2: 80}
	wNormal := b.obs.expect(b.split(name, normal))
	if err := b.f.Hub.Create(ctx, b.shiftApp(name, members)); err != nil {
		return fmt.Errorf("creating MyApp %s: %w", name, err)
	}
	if _, err := wNormal.wait(ctx, b.opts.timeout, "the Deployments of "+name+" at 8 / 2"); err != nil {
		return err
	}
	if _, err := b.routeAt(ctx, name, normalRoute); err != nil {
		return err
	}
	// Both signals reported OK before the first raise.
	if err := poll(ctx, b.opts.timeout, "both members reporting signal latency OK", func() (string, error) {
		app := &flotillav1.MyApp{}
		if err := b.f.Hub.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: name}, app); err != nil {
			return err.Error(), nil
		}
		ok := 0
		for _, c := range app.Status.Clusters {
			for _, s := range c.Signals {
				if s.State == flotillav1.SignalOK {
					ok++
				}
			}
		}
		if ok < 2 {
			return fmt.Sprintf("%d of 2 signals OK", ok), nil
		}
		return "", nil
	}); err != nil {
		return err
	}

	for i := 0; i <= b.opts.shiftRuns; i++ {
		counted := i > 0
		wCut := b.obs.expect(b.split(name, cut))
		t0 := time.Now()
		if err := b.f.SetGauge(m1, shiftGauge, 0.12); err != nil {
			return err
		}
		tSplit, err := wCut.wait(ctx, b.opts.timeout, "the Deployments of "+name+" at 2 / 8")
		if err != nil {
			return err
		}
		tRoute, err := b.routeAt(ctx, name, cutRoute)
		if err != nil {
			return err
		}
		wBack := b.obs.expect(b.split(name, normal))
		t1 := time.Now()
		if err := b.f.SetGauge(m1, shiftGauge, 0.02); err != nil {
			return err
		}
		tBack, err := wBack.wait(ctx, b.opts.timeout, "the Deployments of "+name+" back at 8 / 2")
		if err != nil {
			return err
		}
		if _, err := b.routeAt(ctx, name, normalRoute); err != nil {
			return err
		}
		progress("run %2d%s: breach -> split %s, -> route %s; recovery (window %s) -> split %s",
			i, warmup(counted), ms(tSplit.Sub(t0)), ms(tRoute.Sub(t0)), shiftRecovery, ms(tBack.Sub(t1)))
		if counted {
			b.shiftSplit.add(tSplit.Sub(t0))
			b.shiftRoute.add(tRoute.Sub(t0))
			b.shiftBack.add(tBack.Sub(t1))
		}
		b.load.sample("health shift")
	}
	if err := b.f.Hub.Delete(ctx, route); err != nil {
		return fmt.Errorf("deleting HTTPRoute %s: %w", name, err)
	}
	return b.deleteApp(ctx, name)
}
