// Package e2e is Flotilla's end-to-end suite: a hub and three member
// clusters, the hub and agents running as they would in production, and
// specs that apply MyApps to the hub and assert what really runs in every
// member.
//
// The suite runs against a ClusterProvider: "testbed" (the default, what CI
// runs) starts a whole local Flotilla on real control-plane processes with
// test/fleet; "kind" connects to kind clusters that
// test/e2e-multikind/kind/up.sh brought up. Specs are functions that take a
// SpecInput (cluster-api's test/e2e style), so the same spec runs against
// either; each Test function in e2e_test.go wraps one spec.
//
//	go test -tags e2e -count=1 -timeout 30m ./test/e2e-multikind/ -v
//	go test -tags e2e -count=1 -timeout 30m ./test/e2e-multikind/ -v -args $(cat test/e2e-multikind/artifacts/kind/e2e-flags)
//
// Every file but this one carries the e2e build tag, so that plain
// `go build ./...` and `go test ./...` leave the suite alone.
//
// When a spec fails, the objects it touched in every cluster and the hub
// and agent logs are written under -artifacts (see README.md).
package e2e
