package truncate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// EventNote is the longest note (message) an Event may carry: the
// apiserver refuses a longer one, and the whole event is lost ("can have
// at most 1024 characters"). A placement over a thousand clusters, which
// names each, is longer.
const EventNote = 1024

// Events wraps rec so that every note it records fits EventNote: longer
// ones are cut with Marker rather than refused.
func Events(rec events.EventRecorder) events.EventRecorder {
	if rec == nil {
		return nil
	}
	return eventRecorder{rec}
}

type eventRecorder struct{ rec events.EventRecorder }

func (r eventRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.rec.Eventf(regarding, related, eventtype, reason, action, "%s", String(fmt.Sprintf(note, args...), EventNote))
}
