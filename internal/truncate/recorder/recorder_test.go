package recorder

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// TestEventsFitTheNoteLimit: a note longer than the apiserver takes is cut
// to truncate.EventNote with the marker; a short one, and its formatting, pass as
// they are.
func TestEventsFitTheNoteLimit(t *testing.T) {
	fake := events.NewFakeRecorder(2)
	rec := Truncating(fake)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}

	rec.Eventf(obj, nil, corev1.EventTypeNormal, "Scheduled", "Schedule", "placed replicas: %s", strings.Repeat("member-0000=1, ", 200))
	got := <-fake.Events
	note := strings.TrimPrefix(got, "Normal Scheduled ")
	if len(note) != truncate.EventNote || !strings.HasSuffix(note, truncate.Marker) || !strings.HasPrefix(note, "placed replicas: member-0000=1, ") {
		t.Errorf("long note: %d bytes, %q...%q; want %d bytes ending in %q", len(note), note[:40], note[len(note)-20:], truncate.EventNote, truncate.Marker)
	}

	rec.Eventf(obj, nil, corev1.EventTypeWarning, "FailedOver", "Evict", "moved %d replicas away from cluster %s (%s)", 3, "east", "unreachable")
	if got, want := <-fake.Events, "Warning FailedOver moved 3 replicas away from cluster east (unreachable)"; got != want {
		t.Errorf("short note: got %q, want %q", got, want)
	}
	if Truncating(nil) != nil {
		t.Error("Truncating(nil) is not nil: a controller without a recorder would call a nil one")
	}
}
