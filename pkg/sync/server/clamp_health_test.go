package server

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestClampHealth: a member reports only the signals its Work asks for,
// once each, in a known state, with a bounded value; a longer message is
// cut, not dropped. What it may not say is dropped and counted, and the
// honest reports beside it pass untouched.
func TestClampHealth(t *testing.T) {
	w := endpointsWork(t)
	w.Spec.Health = &v1alpha1.WorkHealth{Signals: []v1alpha1.HealthSignal{
		{Name: "latency", Type: v1alpha1.SignalPrometheus, Query: "up", Threshold: resource.MustParse("0.08")},
		{Name: "crashes", Type: v1alpha1.SignalBackOffPods, Threshold: resource.MustParse("0")},
	}}
	since := metav1.Now()
	honest := []v1alpha1.SignalStatus{
		{Name: "latency", State: v1alpha1.SignalBreaching, Value: "0.12", Since: &since},
		{Name: "crashes", State: v1alpha1.SignalUnknown, Message: strings.Repeat("e", 5000), Since: &since},
	}
	tests := []struct {
		name      string
		work      *v1alpha1.Work
		report    []v1alpha1.SignalStatus
		want      []string // name=state of what is kept
		wantCut   int
		wantTrunc bool
	}{{
		name: "honest reports pass, a long message is cut", work: w, report: honest,
		want: []string{"latency=Breaching", "crashes=Unknown"}, wantTrunc: true,
	}, {
		name: "a signal the Work does not ask for", work: w,
		report:  append([]v1alpha1.SignalStatus{{Name: "made-up", State: v1alpha1.SignalBreaching}}, honest[0]),
		want:    []string{"latency=Breaching"},
		wantCut: 1,
	}, {
		name: "a second report of a signal", work: w,
		report:  []v1alpha1.SignalStatus{honest[0], {Name: "latency", State: v1alpha1.SignalOK}},
		want:    []string{"latency=Breaching"},
		wantCut: 1,
	}, {
		name: "an unknown state and an oversized value", work: w,
		report:  []v1alpha1.SignalStatus{{Name: "latency", State: "Dying"}, {Name: "crashes", State: v1alpha1.SignalOK, Value: strings.Repeat("9", 65)}},
		wantCut: 2,
	}, {
		name: "a Work without spec.health takes no signal", work: endpointsWork(t),
		report: honest[:1], wantCut: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := endpointsReport()
			st.Health = tt.report
			out, cut := clampStatus(tt.work, st)
			var got []string
			for _, s := range out.Health {
				got = append(got, s.Name+"="+string(s.State))
				if len(s.Message) > MaxStatusMessageLength {
					t.Errorf("signal %s keeps a message of %d bytes", s.Name, len(s.Message))
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
			if cut[clampSignal] != tt.wantCut {
				t.Errorf("cut %d signals, want %d (%v)", cut[clampSignal], tt.wantCut, cut)
			}
			if (cut[clampMessage] > 0) != tt.wantTrunc {
				t.Errorf("message cut = %d, want cut: %v", cut[clampMessage], tt.wantTrunc)
			}
			if len(out.Manifests) != 2 {
				t.Errorf("the manifests beside the signals were disturbed: %d kept", len(out.Manifests))
			}
		})
	}
}
