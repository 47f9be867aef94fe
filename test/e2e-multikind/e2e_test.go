//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The provider and artifacts folder of the whole suite, set by TestMain.
var (
	provider  ClusterProvider
	artifacts string
)

// TestMain parses the flags, starts (or connects to) the clusters once
// for the whole suite, runs the specs and stops what it started. When a
// spec failed, the state of every cluster and the logs also go to
// <artifacts>/suite.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := applySpecsFlag(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if artifacts, err = filepath.Abs(*artifactsFlag); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	provider, err = startProvider(ctx, artifacts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the %s provider: %v\n", *providerFlag, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: %s provider ready in %s with members %v; artifacts of failing specs go to %s\n",
		provider.Name(), time.Since(start).Round(time.Second), provider.MemberNames(), artifacts)
	code := m.Run()
	ran.Lock()
	problems := checkSpecSets(provider.Name(), *specsFlag, ran.skipped)
	ran.Unlock()
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "e2e: spec sets:", p)
	}
	if len(problems) > 0 && code == 0 {
		code = 1
	}
	if code != 0 {
		_ = os.RemoveAll(filepath.Join(artifacts, "suite"))
		dumpClusters(provider, "", filepath.Join(artifacts, "suite"))
		fmt.Fprintf(os.Stderr, "e2e: the state of every cluster and the logs are in %s\n", filepath.Join(artifacts, "suite"))
	}
	if err := provider.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stopping the %s provider: %v\n", provider.Name(), err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// input is the SpecInput of the test t, in a namespace of its own.
func input(t *testing.T, short string) SpecInput {
	track(t)
	return newSpecInput(t, provider, artifacts, short)
}

// independentSpecs counts the independent specs that have not ended.
var independentSpecs sync.WaitGroup

// independent marks t as a spec that disturbs no other: it works only in
// its own namespace (or on a fleet of its own), stops and cuts off
// nothing, changes no member, agent or hub setting, and asserts nothing
// that other specs' pods move (spare capacity). With go test's -parallel
// above 1 (the Makefile's E2E_PARALLEL) such specs run together, once
// every other spec of the suite has ended (go test starts the parallel
// top-level tests after the others); with -parallel=1 they run one after
// another in their place. It is the first call of the test.
func independent(t *testing.T) {
	if testParallelism() < 2 {
		return
	}
	independentSpecs.Add(1)
	// Registered first, so it runs last, after the spec's own cleanup.
	t.Cleanup(independentSpecs.Done)
	t.Parallel()
}

// afterIndependentSpecs is for a check that needs every spec to have run
// (the metric scrape check): it waits until the independent specs have
// ended. t runs in parallel with them so that its wait cannot hold them
// back; it takes one of -parallel's slots while it waits, so one such
// check at most.
func afterIndependentSpecs(t *testing.T) {
	if testParallelism() < 2 {
		return
	}
	t.Parallel()
	independentSpecs.Wait()
}

// testParallelism is go test's -parallel.
func testParallelism() int {
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil {
			return n
		}
	}
	return 1
}

// The specs run in this order, except the independent ones, which run
// together after all the others (independent). The ones that stop a
// member come last; every spec leaves the fleet as it found it. On the
// testbed the fleet is mixed: -push-members (member-3 by default) run in
// Push mode, and every spec runs on that fleet; the ones that disturb
// agents pick a Pull member.

func TestInvalidMyAppRefused(t *testing.T) {
	independent(t)
	InvalidSpec(t, input(t, "invalid"))
}

// TestDuplicated also edits the Deployment of every member by hand (the
// Push member's too) and sees each edit reverted.
func TestDuplicated(t *testing.T) {
	independent(t)
	in := input(t, "duplicated")
	DuplicatedSpec(t, in, in.Members...)
}
func TestDividedStaticWeights(t *testing.T) {
	independent(t)
	DividedStaticSpec(t, input(t, "static"))
}

// TestDividedDynamicWeights and TestScaleToZeroDynamicWeights place by the
// members' spare cpu, which other specs' pods would move: not independent.
func TestDividedDynamicWeights(t *testing.T) {
	DynamicWeightsSpec(t, input(t, "dynamic"))
}
func TestScaleToZero(t *testing.T) {
	independent(t)
	ScaleToZeroSpec(t, input(t, "zero"))
}
func TestScaleToZeroDuplicated(t *testing.T) {
	independent(t)
	ScaleToZeroDuplicatedSpec(t, input(t, "zero-dup"))
}
func TestScaleToZeroDynamicWeights(t *testing.T) {
	ScaleToZeroDynamicSpec(t, input(t, "zero-dyn"))
}
func TestScaleToZeroProgressive(t *testing.T) {
	independent(t)
	ScaleToZeroProgressiveSpec(t, input(t, "zero-rollout"))
}
func TestScaleUpAndDown(t *testing.T) {
	independent(t)
	ScaleSpec(t, input(t, "scale"))
}
func TestImageRollout(t *testing.T) {
	independent(t)
	ImageRolloutSpec(t, input(t, "image"))
}
func TestPerClusterOverride(t *testing.T) {
	independent(t)
	OverrideSpec(t, input(t, "override"))
}
func TestDeleteRemovesEverything(t *testing.T) {
	independent(t)
	DeleteSpec(t, input(t, "delete"))
}
func TestFullPodTemplate(t *testing.T) {
	independent(t)
	FullPodTemplateSpec(t, input(t, "template"))
}
func TestDependencies(t *testing.T) {
	independent(t)
	DependenciesSpec(t, input(t, "deps"))
}
func TestProgressiveRolloutOrder(t *testing.T) {
	independent(t)
	ProgressiveOrderSpec(t, input(t, "progressive"))
}
func TestProgressiveRolloutFailure(t *testing.T) {
	independent(t)
	ProgressiveFailureSpec(t, input(t, "rollout-failed"))
}
func TestProgressiveRolloutRollback(t *testing.T) {
	independent(t)
	ProgressiveRollbackSpec(t, input(t, "rollback"))
}
func TestProgressiveRolloutPaused(t *testing.T) {
	independent(t)
	ProgressivePausedSpec(t, input(t, "paused"))
}

// TestHealthShift gives the first two Pull members a Prometheus each,
// whose agents query it for the test (skipped on providers that cannot),
// installs the HTTPRoute CRD on the hub, and runs the health-shift specs
// on those members, each in a namespace of its own.
func TestHealthShift(t *testing.T) {
	track(t)
	mp, members := healthShiftMembers(t)
	installHTTPRouteCRD(t)
	t.Run("PrometheusSignal", func(t *testing.T) {
		HealthShiftPrometheusSpec(t, input(t, "hs-prometheus"), mp, members)
	})
	t.Run("WorkloadSignal", func(t *testing.T) { HealthShiftWorkloadSpec(t, input(t, "hs-workload"), members) })
	t.Run("AllClustersSick", func(t *testing.T) { HealthShiftAllSickSpec(t, input(t, "hs-all-sick"), mp, members) })
	t.Run("UnknownSignal", func(t *testing.T) { HealthShiftUnknownSpec(t, input(t, "hs-unknown"), members) })
}
func TestSyncModeSwitch(t *testing.T)      { SyncModeSwitchSpec(t, input(t, "switch")) }
func TestBadKubeconfig(t *testing.T)       { BadKubeconfigSpec(t, input(t, "bad-kubeconfig")) }
func TestAgentLeaderFailover(t *testing.T) { AgentLeaderFailoverSpec(t, input(t, "agent")) }
func TestAgentPausedLeader(t *testing.T)   { AgentPausedLeaderSpec(t, input(t, "agent-paused")) }
func TestHubRestart(t *testing.T)          { HubRestartSpec(t, input(t, "hub")) }

// TestFailover and TestFailback stop the Push member (member-2 in an
// all-pull fleet); TestMemberLoss keeps the Pull path covered.
func TestFailover(t *testing.T) {
	in := input(t, "failover")
	FailoverSpec(t, in, pushMemberOr(in, in.Members[1]))
}
func TestFailback(t *testing.T) {
	in := input(t, "failback")
	FailbackSpec(t, in, pushMemberOr(in, in.Members[1]))
}

// TestPartition cuts the last member off the network (kind only).
func TestPartition(t *testing.T) {
	in := input(t, "partition")
	PartitionSpec(t, in, in.Members[len(in.Members)-1])
}

// TestTrafficStaysInNodes: on a provider of real nodes (kind), a
// connection to a Service address no Service holds, and one to an address
// outside the docker network, are refused inside each member's node, from
// the node and from an agent pod, not routed out of it (StartMember checks
// the node again after every restart).
func TestTrafficStaysInNodes(t *testing.T) {
	track(t)
	independent(t)
	g, ok := provider.(EgressGuard)
	if !ok {
		t.Skipf("the %s provider's members are not nodes on a network of the tests'", provider.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range provider.MemberNames() {
		if err := g.TrafficStaysInside(ctx, m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
}

func TestScaleToZeroFailover(t *testing.T) {
	ScaleToZeroFailoverSpec(t, input(t, "zero-failover"))
}
