// Package works is the agent's heart: it holds the Works the hub sent,
// applies them to the member with pkg/apply, keeps them applied (a
// Deployment edited by hand is set back) and reports their status to the
// hub through the sync client.
//
// Store implements the sync client's Applier: the client hands it upserts
// and deletes in stream order and, after a complete snapshot, the set of
// Works to keep, which is the only time anything is pruned. What may be
// deleted is pkg/apply's decision: only objects in the applier's applied
// set (recorded per Work in ConfigMaps in the agent's namespace, so an
// agent restart keeps it), still carrying the UID, the Work's labels and
// the fleet id and cluster name the hub's hello gave, never while the
// agent has no fleet id or its leader-lease fence fails, and for a prune
// only within the deletion brake unless the hub confirmed it. A blocked
// prune returns the applier's *apply.PruneBlockedError for the client to
// report; the Works it would have removed are no longer held or
// reconciled, and their objects keep running until a confirmed prune. Reconciler
// watches the Deployments the agent owns (through a cache that holds only
// objects carrying the flotilla.dev/work label) and, for each change,
// re-applies the Work when its objects drifted and reports its status.
// Neither needs the hub: with the hub unreachable the agent deletes nothing
// and keeps its Deployments as the last Works said.
package works
