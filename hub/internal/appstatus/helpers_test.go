package appstatus

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/internal/fixture"
)

// The fixtures the tests here share with pkg/rollout and the MyApp controller.
var (
	t0           = fixture.Now
	readyMember  = fixture.ReadyMember
	lostMember   = fixture.LostMember
	condition    = fixture.Condition
	reportedWork = fixture.ReportedWork
	healthyWork  = fixture.HealthyWork
)

// wantCondition is what a test expects of one condition: its status and
// reason, and words its message must contain.
type wantCondition struct {
	status   metav1.ConditionStatus
	reason   string
	contains []string
}

func checkCondition(t *testing.T, conds []metav1.Condition, typ string, w wantCondition) {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Errorf("no %s condition in %+v", typ, conds)
		return
	}
	if c.Status != w.status || c.Reason != w.reason {
		t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, w.status, w.reason)
	}
	for _, s := range w.contains {
		if !strings.Contains(c.Message, s) {
			t.Errorf("%s message %q does not contain %q", typ, c.Message, s)
		}
	}
}
