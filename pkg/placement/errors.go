package placement

import (
	"errors"
	"strconv"
	"strings"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Sentinel errors that errors.Is matches against a *ScheduleError by its
// Reason.
var (
	// ErrUnschedulable: no cluster (group) can run the app.
	ErrUnschedulable = errors.New(v1alpha1.ReasonUnschedulable)
	// ErrSpreadConstraintsNotMet: too few groups are eligible for the
	// spread constraints.
	ErrSpreadConstraintsNotMet = errors.New(v1alpha1.ReasonSpreadConstraintsNotMet)
)

// ScheduleError says why no decision could be made. Its message is meant
// for the MyApp's Scheduled condition.
type ScheduleError struct {
	// Reason is v1alpha1.ReasonSpreadConstraintsNotMet when every group
	// tried failed on its spread constraints, v1alpha1.ReasonUnschedulable
	// otherwise.
	Reason string
	// Attempts has one entry per affinity group tried, in order. A placement
	// without clusterAffinities has one, with an empty AffinityName.
	Attempts []Attempt
}

// Attempt is why one affinity group could not be scheduled.
type Attempt struct {
	// AffinityName is the group's name ("" without clusterAffinities).
	AffinityName string
	// Reason is v1alpha1.ReasonUnschedulable or
	// v1alpha1.ReasonSpreadConstraintsNotMet.
	Reason string
	// Message says what went wrong as a whole.
	Message string
	// Filtered names, cluster by cluster, the filter that removed it.
	Filtered []ClusterReason
}

// maxListed bounds how many clusters an error message names, so that it
// fits a condition message; Attempts holds them all.
const maxListed = 32

func (e *ScheduleError) Error() string {
	var b strings.Builder
	for i, a := range e.Attempts {
		if i > 0 {
			b.WriteString("; ")
		}
		if len(e.Attempts) > 1 || a.AffinityName != "" {
			b.WriteString("[" + a.AffinityName + "] ")
		}
		b.WriteString(a.Message)
		for j, f := range a.Filtered {
			if j == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString("; ")
			}
			if j == maxListed {
				b.WriteString("and " + strconv.Itoa(len(a.Filtered)-j) + " more")
				break
			}
			b.WriteString(f.Name + ": " + f.Reason)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUnschedulable) and
// errors.Is(err, ErrSpreadConstraintsNotMet) work by Reason.
func (e *ScheduleError) Is(target error) bool {
	switch target {
	case ErrUnschedulable:
		return e.Reason == v1alpha1.ReasonUnschedulable
	case ErrSpreadConstraintsNotMet:
		return e.Reason == v1alpha1.ReasonSpreadConstraintsNotMet
	}
	return false
}
