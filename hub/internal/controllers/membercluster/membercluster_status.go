package membercluster

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// healthInput is what computeHealth reads.
type healthInput struct {
	now time.Time
	// grace is how long a cluster may go without a heartbeat.
	grace time.Duration
	// since is when this hub started tracking (it heard nothing before).
	since time.Time
	// agent is the in-memory state; known is false when this process has
	// heard nothing of the cluster's agent.
	agent agentState
	known bool
	// recorded is the last heartbeat the status records, if any.
	recorded *metav1.Time
	// conditions are the current status conditions.
	conditions []metav1.Condition
	// name and acceptance are the member's name and spec.acceptance (""
	// counts as Accepted).
	name       string
	acceptance flotillav1.Acceptance
}

// healthOutput is the computed health.
type healthOutput struct {
	ready, connected metav1.Condition
	// healthy says whether the cluster heartbeats within the grace period.
	healthy bool
	// lost says the cluster was seen once and is past its grace period:
	// it gets the unreachable taint.
	lost bool
	// lastHeartbeat is the newest heartbeat known (zero if none).
	lastHeartbeat time.Time
	// recheckAfter is when health changes with time alone (0: never).
	recheckAfter time.Duration
}

// computeHealth decides the Ready and Connected conditions. A Push member
// the hub cannot push to at all (a bad kubeconfig Secret) is Ready False
// with that reason, whatever its heartbeats say; whether it is lost (and
// tainted) still follows from its last heartbeat and the grace period, as
// for a silent agent.
func computeHealth(in healthInput) healthOutput {
	out := computeLiveness(in)
	if in.known && in.agent.pushProblem != nil {
		p := in.agent.pushProblem
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse, Reason: p.reason, Message: p.message}
		out.ready = metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionFalse, Reason: p.reason, Message: p.message}
		out.healthy = false
	}
	return out
}

// computeLiveness decides Ready and Connected from connection and
// heartbeats.
func computeLiveness(in healthInput) healthOutput {
	var out healthOutput
	last := time.Time{}
	if in.recorded != nil {
		last = in.recorded.Time
	}
	if in.known && in.agent.lastHeartbeat.After(last) {
		last = in.agent.lastHeartbeat
	}
	out.lastHeartbeat = last

	// Connected says whether a stream is open to this hub now.
	switch {
	case in.known && in.agent.connected && in.agent.push:
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionTrue,
			Reason: flotillav1.ReasonPushing, Message: fmt.Sprintf("Push mode: the hub (%s) reaches the member's apiserver itself", in.agent.info.Instance)}
	case in.known && in.agent.push:
		msg := "Push mode: the hub cannot reach the member's apiserver"
		if in.agent.disconnectReason != "" {
			msg += ": " + in.agent.disconnectReason
		}
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse,
			Reason: flotillav1.ReasonPushUnreachable, Message: msg}
	case in.known && in.agent.connected:
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionTrue,
			Reason: flotillav1.ReasonStreamOpen, Message: fmt.Sprintf("agent %s connected from %s", in.agent.info.Instance, in.agent.info.Peer)}
	case !(in.acceptance == "" || in.acceptance == flotillav1.AcceptanceAccepted):
		// The hub refuses the member's agent (see syncbridge.Admission):
		// that, not the network, is why no stream is open.
		msg := "the member is Pending: it joined and waits for an admin (kubectl flotilla accept %s)"
		if in.acceptance == flotillav1.AcceptanceDenied {
			msg = "the member is Denied: the hub serves its agent nothing (kubectl flotilla accept %s lets it back in)"
		}
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse,
			Reason: flotillav1.ReasonNotAccepted, Message: fmt.Sprintf(msg, in.name)}
	case in.known && in.agent.refusal != nil:
		r := in.agent.refusal
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse,
			Reason:  flotillav1.ReasonFleetMismatch,
			Message: fmt.Sprintf("the agent (from %s) refused this hub and applies nothing from it: %s", r.Peer, r.Reason)}
	case in.known:
		msg := "the agent's stream ended"
		if in.agent.disconnectReason != "" {
			msg += ": " + in.agent.disconnectReason
		}
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse,
			Reason: flotillav1.ReasonStreamClosed, Message: msg}
	case last.IsZero():
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse,
			Reason: flotillav1.ReasonNeverConnected, Message: "no agent has connected yet"}
	default:
		out.connected = metav1.Condition{Type: flotillav1.ConditionConnected, Status: metav1.ConditionFalse,
			Reason: flotillav1.ReasonStreamClosed, Message: "no agent is connected to this hub instance"}
	}

	if last.IsZero() {
		out.ready = metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionUnknown,
			Reason: flotillav1.ReasonNeverConnected, Message: "no agent has connected yet"}
		return out
	}
	// A hub that just started heard nothing: count the grace period from
	// its start so agents can reconnect to it before anything is lost.
	reference := last
	if !in.known && in.since.After(reference) {
		reference = in.since
	}
	deadline := reference.Add(in.grace)
	if !in.now.After(deadline) {
		out.healthy = true
		out.recheckAfter = deadline.Sub(in.now) + 100*time.Millisecond
		if !in.known {
			// Nothing heard yet from this hub's point of view: keep Ready
			// as it stands until the deadline.
			if c := meta.FindStatusCondition(in.conditions, flotillav1.ConditionReady); c != nil {
				out.ready = *c
				out.healthy = c.Status == metav1.ConditionTrue
				return out
			}
		}
		msg := "the agent heartbeats"
		if in.known && in.agent.push {
			msg = "Push mode: the member's apiserver answers the hub"
		}
		out.ready = metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: flotillav1.ReasonHeartbeating, Message: msg}
		return out
	}
	// A member the hub refuses is cut off on purpose, not unreachable: it
	// gets no unreachable taint and does not count towards the partition
	// brake (denying many members at once is no partition). The
	// scheduler leaves it out anyway (placement's Acceptance filter).
	out.lost = in.acceptance == "" || in.acceptance == flotillav1.AcceptanceAccepted
	out.ready = metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionUnknown,
		Reason:  flotillav1.ReasonHeartbeatMissed,
		Message: fmt.Sprintf("no heartbeat since %s (grace period %s)", last.UTC().Format(time.RFC3339), in.grace)}
	return out
}

// computePruneBlocked decides the PruneBlocked condition from what this
// process heard of the agent's prunes; nil leaves the condition as it is
// (a hub that just started heard nothing yet, and the agent reports again
// on its next snapshot).
func computePruneBlocked(cluster string, agent agentState, known bool) *metav1.Condition {
	if !known || !agent.pruneHeard {
		return nil
	}
	if b := agent.blocked; b != nil {
		works := strings.Join(b.Works, ", ")
		if int64(len(b.Works)) < b.WouldDelete && len(b.Works) > 0 {
			works += ", ..."
		}
		return &metav1.Condition{Type: flotillav1.ConditionPruneBlocked, Status: metav1.ConditionTrue,
			Reason: flotillav1.ReasonAwaitingPruneConfirmation,
			Message: fmt.Sprintf("the agent's deletion brake holds the prune after snapshot %d: it would delete %d of the %d objects the member runs (Works: %s), and nothing was deleted. "+
				"If these deletions are intended, confirm with: kubectl annotate membercluster %s %s=%d --overwrite",
				b.Epoch, b.WouldDelete, b.Held, works, cluster, flotillav1.AnnotationConfirmPrune, b.Epoch)}
	}
	return &metav1.Condition{Type: flotillav1.ConditionPruneBlocked, Status: metav1.ConditionFalse,
		Reason: flotillav1.ReasonPruned, Message: "the agent pruned to its latest snapshot"}
}

// confirmDue says whether the prune the agent holds should be confirmed
// now: the MemberCluster's confirm annotation names its epoch, and it was
// not confirmed already.
func confirmDue(annotations map[string]string, agent agentState) (uint64, bool) {
	b := agent.blocked
	if b == nil || agent.confirmSent == b.Epoch {
		return 0, false
	}
	v, ok := annotations[flotillav1.AnnotationConfirmPrune]
	if !ok || strings.TrimSpace(v) != strconv.FormatUint(b.Epoch, 10) {
		return 0, false
	}
	return b.Epoch, true
}

// withUnreachableTaint returns taints with the unreachable taint present
// (keeping its TimeAdded if it already was) or absent.
func withUnreachableTaint(taints []corev1.Taint, present bool, now time.Time) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(taints)+1)
	found := false
	for _, t := range taints {
		if t.Key == flotillav1.TaintClusterUnreachable && t.Effect == corev1.TaintEffectNoExecute {
			if present {
				found = true
				out = append(out, t)
			}
			continue
		}
		out = append(out, t)
	}
	if present && !found {
		added := metav1.NewTime(now.Truncate(time.Second))
		out = append(out, corev1.Taint{Key: flotillav1.TaintClusterUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added})
	}
	return out
}
