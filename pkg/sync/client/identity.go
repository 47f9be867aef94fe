package client

import "fmt"

// FleetRecord is which fleet (hub) and which cluster name an agent
// serves, as it records them in its member.
type FleetRecord struct {
	FleetID string
	Cluster string
}

// DecideIdentity is the rule every Identity follows for a HubHello that
// offers offered, given the member's record (nil: none yet) and the fleet
// id an admin accepted on purpose (accept; "" for none):
//
//   - no record: serve the hub, and record it (write is true);
//   - the record matches: serve it;
//   - it differs and accept is the offered fleet id: serve it and replace
//     the record (write is true), which is how an admin moves a member to
//     another hub or renames it;
//   - otherwise refuse, with a *FleetMismatchError saying what differs.
func DecideIdentity(recorded *FleetRecord, offered FleetRecord, accept string) (write bool, err error) {
	switch {
	case recorded == nil:
		return true, nil
	case *recorded == offered:
		return false, nil
	case accept != "" && accept == offered.FleetID:
		return true, nil
	}
	e := &FleetMismatchError{
		FleetID: offered.FleetID, Cluster: offered.Cluster,
		RecordedFleetID: recorded.FleetID, RecordedCluster: recorded.Cluster,
	}
	if recorded.FleetID != offered.FleetID {
		e.Reason = fmt.Sprintf("this agent serves fleet %s, not the hub's fleet %s (a hub restored from a backup or installed again has a new fleet id); "+
			"to serve the new hub on purpose, accept fleet id %s (agent flag --accept-fleet-id=%s)", recorded.FleetID, offered.FleetID, offered.FleetID, offered.FleetID)
	} else {
		e.Reason = fmt.Sprintf("this agent serves cluster %q of fleet %s, but the hub takes it for cluster %q; "+
			"to rename the member on purpose, accept fleet id %s (agent flag --accept-fleet-id=%s)", recorded.Cluster, recorded.FleetID, offered.Cluster, offered.FleetID, offered.FleetID)
	}
	return false, e
}
