package webhook

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/util/validation/field"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
)

// validateHealthShift checks what the CRD schema cannot: each Prometheus
// query parses as PromQL (once its variables are replaced) and uses only
// known variables, thresholds are not negative, durations are sensible.
func validateHealthShift(hs *flotillav1.HealthShift, path *field.Path) field.ErrorList {
	if hs == nil {
		return nil
	}
	var errs field.ErrorList
	for i, s := range hs.Signals {
		sp := path.Child("signals").Index(i)
		if s.Threshold.Sign() < 0 {
			errs = append(errs, field.Invalid(sp.Child("threshold"), s.Threshold.String(), "must not be negative"))
		}
		if s.Type != flotillav1.SignalPrometheus {
			continue
		}
		if unknown := render.UnknownQueryVariables(s.Query); len(unknown) > 0 {
			errs = append(errs, field.Invalid(sp.Child("query"), s.Query,
				"unknown variables "+strings.Join(unknown, ", ")+": use ${cluster}, ${namespace}, ${name} or ${label:KEY}"))
			continue
		}
		q := render.RenderQuery(s.Query, "cluster", "namespace", "name", map[string]string{})
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
		if err != nil {
			errs = append(errs, field.Invalid(sp.Child("query"), s.Query, "not valid PromQL: "+err.Error()))
			continue
		}
		if t := expr.Type(); t != parser.ValueTypeVector && t != parser.ValueTypeScalar {
			what := string(t)
			if t == parser.ValueTypeMatrix {
				what = "matrix (a range vector)"
			}
			errs = append(errs, field.Invalid(sp.Child("query"), s.Query,
				fmt.Sprintf("evaluates to a %s; it must give an instant vector of one series or a scalar", what)))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		set  bool
	}{
		{"for", hs.ForDuration(), hs.For != nil},
		{"interval", hs.IntervalDuration(), hs.Interval != nil},
		{"stepInterval", hs.StepDuration(), hs.StepInterval != nil},
		{"recoveryWindow", hs.RecoveryDuration(), hs.RecoveryWindow != nil},
	} {
		if !d.set {
			continue
		}
		if d.v < time.Second || d.v > 24*time.Hour {
			errs = append(errs, field.Invalid(path.Child(d.name), d.v.String(), "must be between 1s and 24h"))
		}
	}
	return errs
}

// validateTraffic checks spec.traffic: a route without a health shift has
// weights that never move, which is allowed (it follows the normal split);
// each backend's cluster is named once.
func validateTraffic(t *flotillav1.TrafficSpec, path *field.Path) field.ErrorList {
	if t == nil || t.HTTPRoute == nil {
		return nil
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, b := range t.HTTPRoute.Backends {
		key := b.BackendGroup + "/" + b.BackendKind + "/" + b.BackendName
		if seen[key] {
			errs = append(errs, field.Duplicate(path.Child("httpRoute", "backends").Index(i).Child("backendName"), b.BackendName))
		}
		seen[key] = true
	}
	return errs
}
