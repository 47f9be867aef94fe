package render

import (
	"fmt"
	"regexp"
	"strings"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// WorkHealth is what cluster evaluates for app's health shift: the
// policy's signals with each Prometheus query rendered for the cluster
// (see RenderQuery), its interval and `for`; nil without a policy.
func WorkHealth(app *flotillav1.MyApp, cluster string) *flotillav1.WorkHealth {
	hs := app.Spec.Placement.HealthShift
	if hs == nil {
		return nil
	}
	wh := &flotillav1.WorkHealth{Signals: make([]flotillav1.HealthSignal, 0, len(hs.Signals))}
	wh.Interval.Duration = hs.IntervalDuration()
	wh.For.Duration = hs.ForDuration()
	for _, s := range hs.Signals {
		s = *s.DeepCopy()
		if s.Type == flotillav1.SignalPrometheus {
			s.Query = RenderQuery(s.Query, cluster, TargetNamespace(app), app.Name, app.Labels)
		}
		wh.Signals = append(wh.Signals, s)
	}
	return wh
}

// queryVar matches the variables of a health-shift query.
var queryVar = regexp.MustCompile(`\$\{(cluster|namespace|name|label:[^}]*)\}`)

// anyQueryVar matches anything written as a variable.
var anyQueryVar = regexp.MustCompile(`\$\{[^}]*\}`)

// RenderQuery replaces ${cluster}, ${namespace} (the member namespace),
// ${name} and ${label:KEY} (the MyApp's label KEY, empty when unset) in a
// PromQL query. Values are escaped for a double-quoted PromQL string (a
// backslash, a double quote, a newline), so a value cannot end the string
// it stands in; use the variables inside double quotes.
func RenderQuery(q, cluster, namespace, name string, labels map[string]string) string {
	return queryVar.ReplaceAllStringFunc(q, func(v string) string {
		key := v[2 : len(v)-1]
		var val string
		switch {
		case key == "cluster":
			val = cluster
		case key == "namespace":
			val = namespace
		case key == "name":
			val = name
		default:
			val = labels[strings.TrimPrefix(key, "label:")]
		}
		return promEscape(val)
	})
}

func promEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// UnknownQueryVariables lists the ${...} of q that RenderQuery does not
// know, for the webhook's error.
func UnknownQueryVariables(q string) []string {
	var out []string
	for _, m := range anyQueryVar.FindAllString(q, -1) {
		if !queryVar.MatchString(m) {
			out = append(out, fmt.Sprintf("%q", m))
		}
	}
	return out
}
