package webhook

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func promSignal(q string) flotillav1.HealthSignal {
	return flotillav1.HealthSignal{Name: "latency", Type: flotillav1.SignalPrometheus, Query: q, Threshold: resource.MustParse("0.08")}
}

// TestValidateHealthShift: a PromQL syntax error, an unknown variable, a
// range-vector query, a negative threshold and a duration out of bounds
// are refused, each naming its field; valid queries with every variable
// pass.
func TestValidateHealthShift(t *testing.T) {
	p := field.NewPath("spec", "placement", "healthShift")
	tests := []struct {
		name string
		hs   flotillav1.HealthShift
		// want are "field: substring" of each error, in order.
		want []string
	}{{
		name: "a valid query with every variable",
		hs: flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(
			`histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{cluster="${cluster}",namespace="${namespace}",app="${name}",team="${label:team}"}[1m])))`)}},
	}, {
		name: "a scalar query",
		hs:   flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(`scalar(up{cluster="${cluster}"})`)}},
	}, {
		name: "workload signals need no query",
		hs: flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{
			{Name: "crashes", Type: flotillav1.SignalBackOffPods, Threshold: resource.MustParse("0")},
			{Name: "unavailable", Type: flotillav1.SignalUnavailableRatio, Threshold: resource.MustParse("0.5")},
		}},
	}, {
		name: "a PromQL syntax error",
		hs:   flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(`rate(http_requests_total{cluster="${cluster}"}[1m]`)}},
		want: []string{"spec.placement.healthShift.signals[0].query: not valid PromQL"},
	}, {
		name: "an unknown variable",
		hs:   flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(`up{cluster="${clustr}"}`)}},
		want: []string{`spec.placement.healthShift.signals[0].query: unknown variables "${clustr}"`},
	}, {
		name: "a range vector",
		hs:   flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(`up[5m]`)}},
		want: []string{"spec.placement.healthShift.signals[0].query: evaluates to a matrix"},
	}, {
		name: "a negative threshold",
		hs:   flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{{Name: "x", Type: flotillav1.SignalRestartRate, Threshold: resource.MustParse("-1")}}},
		want: []string{"spec.placement.healthShift.signals[0].threshold: must not be negative"},
	}, {
		name: "durations out of bounds",
		hs: flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(`up`)},
			For: &metav1.Duration{Duration: 100 * 1e6}, RecoveryWindow: &metav1.Duration{Duration: 48 * 3600 * 1e9}},
		want: []string{"spec.placement.healthShift.for: must be between 1s and 24h", "spec.placement.healthShift.recoveryWindow: must be between 1s and 24h"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateHealthShift(&tt.hs, p)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors %v, want %d %v", len(errs), errs, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				f, msg, _ := strings.Cut(w, ": ")
				if errs[i].Field != f || !strings.Contains(errs[i].Error(), msg) {
					t.Errorf("error %d = %q (field %s), want field %s containing %q", i, errs[i].Error(), errs[i].Field, f, msg)
				}
			}
		})
	}
}

// TestValidateMyAppRefusesABadQuery: the whole validation names the
// query's field, and a route listing one backend twice is refused.
func TestValidateMyAppRefusesABadQuery(t *testing.T) {
	app := validApp(func(a *flotillav1.MyApp) {
		a.Spec.Placement.HealthShift = &flotillav1.HealthShift{Signals: []flotillav1.HealthSignal{promSignal(`sum(`)}}
		a.Spec.Traffic = &flotillav1.TrafficSpec{HTTPRoute: &flotillav1.HTTPRouteTraffic{Name: "web", Backends: []flotillav1.ClusterBackend{
			{Cluster: "a", BackendName: "web-a"}, {Cluster: "b", BackendName: "web-a"}}}}
	})
	errs, _ := ValidateMyApp(app)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	want := []string{"spec.placement.healthShift.signals[0].query", "spec.traffic.httpRoute.backends[1].backendName"}
	if strings.Join(fields, ",") != strings.Join(want, ",") {
		t.Errorf("errors name %v, want %v (errors: %v)", fields, want, errs)
	}
}
