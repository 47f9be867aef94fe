//go:build e2e

package e2e

import "testing"

// Specs of the default timings and the partition brake (docs/architecture.md,
// timing budget). They run after e2e_test.go's; the ones that stop
// members come last.

func TestAgentRestart(t *testing.T)   { AgentRestartSpec(t, input(t, "agent-restart")) }
func TestHubKill(t *testing.T)        { HubKillSpec(t, input(t, "hub-kill")) }
func TestPartitionBrake(t *testing.T) { PartitionBrakeSpec(t, input(t, "brake")) }

// TestMemberLoss stops the second Pull member (member-2 with member-3
// pushed): the 30s bound on the Pull path.
func TestMemberLoss(t *testing.T) {
	in := input(t, "member-loss")
	MemberLossSpec(t, in, pullMember(t, in, 1))
}
