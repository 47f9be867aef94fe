// Package works is the agent's heart: it holds the Works the hub sent,
// applies them to the member with pkg/apply, keeps them applied (a
// Deployment edited by hand is set back) and reports their status to the
// hub through the sync client.
//
// Store implements the sync client's Applier: the client hands it upserts
// and deletes in stream order and, after a complete snapshot, the set of
// Works to keep, which is the only time anything is pruned. Reconciler
// watches the Deployments the agent owns (through a cache that holds only
// objects carrying the flotilla.dev/work label) and, for each change,
// re-applies the Work when its objects drifted and reports its status.
// Neither needs the hub: with the hub unreachable the agent deletes nothing
// and keeps its Deployments as the last Works said.
package works
