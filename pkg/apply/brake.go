package apply

import (
	"fmt"
	"strings"
)

// Brake caps how much one Prune may delete without confirmation. A prune
// is held when it would delete more than Share of the objects the Applier
// holds AND more than Count objects: both must be exceeded.
//
// It counts objects, not Works, because objects are what runs: a Work may
// carry a bundle of several objects, and a snapshot that drops a few large
// Works should weigh what it removes, not how many names it drops. The
// count floor lets a small member lose a handful of objects in one
// snapshot (two MyApps deleted together on a member that runs three)
// without anybody confirming it, while a snapshot that empties most of a
// member (a hub restored from an old backup, the Work CRD re-created, an
// agent pointed at another hub's cluster namespace) is stopped.
type Brake struct {
	// Share is the fraction of held objects, between 0 and 1, that a prune
	// may delete without confirmation. 1 turns the brake off.
	Share float64
	// Count is the number of objects a prune may always delete without
	// confirmation, whatever the share.
	Count int
}

// DefaultBrake holds a prune that would delete more than half of what the
// Applier holds and more than five objects.
var DefaultBrake = Brake{Share: 0.5, Count: 5}

// BrakeHolds says a prune that would delete wouldDelete of the held
// objects must wait for confirmation under cfg.
func BrakeHolds(wouldDelete, held int, cfg Brake) bool {
	return wouldDelete > cfg.Count && float64(wouldDelete) > cfg.Share*float64(held)
}

// PruneBlockedError is Prune's error when the brake held: nothing was
// deleted. The caller reports it (to the hub, on the MemberCluster) and
// prunes again with confirmed set once a person or the hub confirmed the
// deletion, or deletes the Works one at a time.
type PruneBlockedError struct {
	// WouldDelete is the number of recorded objects the prune would have
	// deleted.
	WouldDelete int
	// Held is the number of recorded objects the Applier holds.
	Held int
	// Works are the Works whose objects the prune would have deleted,
	// sorted.
	Works []string
	// Brake is the configuration that held.
	Brake Brake
}

func (e *PruneBlockedError) Error() string {
	works := e.Works
	more := ""
	if len(works) > 10 {
		works, more = works[:10], fmt.Sprintf(" and %d more", len(e.Works)-10)
	}
	return fmt.Sprintf("prune blocked by the deletion brake: it would delete %d of the %d objects this applier holds "+
		"(more than %g%% and more than %d), those of %d Works (%s%s); nothing was deleted, and the prune waits for confirmation",
		e.WouldDelete, e.Held, e.Brake.Share*100, e.Brake.Count, len(e.Works), strings.Join(works, ", "), more)
}
