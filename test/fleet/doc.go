// Package fleet runs the whole of Flotilla locally: a testbed hub and member
// clusters (real control planes), Flotilla's CRDs in the hub, certificates
// from pkg/pki, MemberCluster objects, and the hub and one or more agents per
// member as separate processes of the built binaries. The `make run` demo,
// the e2e suite's testbed provider and the latency benchmark all use it.
//
// Hub and agent processes are supervised like pods with restartPolicy
// Always: one that exits is started again after a second, which is what
// makes "kill the agent leader" and "the member's apiserver went away"
// behave here as they would in a cluster.
//
// Demo plugs a fleet into the testbed's supervisor (test/testbed/supervisor)
// for `testbed run --flotilla`: it applies example MyApps and draws the live
// table of members and MyApps. The dependencies go one way: fleet builds on
// test/testbed, and cmd/testbed, e2e and bench build on fleet; nothing under
// test/testbed imports this package.
package fleet
