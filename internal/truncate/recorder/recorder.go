// Package recorder cuts the notes of Kubernetes events to what the
// apiserver takes (truncate.EventNote). It is apart from internal/truncate,
// which the agent's packages use, because client-go's events package links
// the typed clients of every API group.
package recorder

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// Truncating wraps rec so that every note it records fits
// truncate.EventNote: longer ones are cut with truncate.Marker rather than
// refused.
func Truncating(rec events.EventRecorder) events.EventRecorder {
	if rec == nil {
		return nil
	}
	return eventRecorder{rec}
}

type eventRecorder struct{ rec events.EventRecorder }

func (r eventRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.rec.Eventf(regarding, related, eventtype, reason, action, "%s", truncate.String(fmt.Sprintf(note, args...), truncate.EventNote))
}
