// Package cli is kubectl-flotilla: install a hub (init), manage bootstrap
// tokens (token), join a member (join: with an agent, or with --mode push
// a kubeconfig for the hub, push.go), let it in or keep it out (accept,
// deny), take it out again (unjoin), and read the fleet (status, why,
// version).
//
// Every command is a cobra command built on an options struct whose Run
// does the work with clients it is given, so tests and the test harness
// (test/fleet) call the same Go functions the binary does, against real
// apiservers. The decisions in between (what a token list shows, how a
// placement is explained, what a join's wait reports) are pure functions
// with table or golden-file tests.
//
// Conventions follow kubectl's: --kubeconfig, --context and -n from
// k8s.io/cli-runtime's ConfigFlags, -o wide|json|yaml, server-side apply
// with the field manager kubectl-flotilla, and errors that name the
// object or the flag at fault.
package cli
