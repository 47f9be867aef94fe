package membercluster

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// agentState is what the hub knows, in memory, of one cluster's agent.
type agentState struct {
	connected     bool
	info          syncserver.AgentInfo
	lastHeartbeat time.Time
	resources     *flotillav1.ResourceSummary
	// disconnectReason is why the last stream ended.
	disconnectReason string
	// refusal is the last refusal of this hub by an agent of the cluster;
	// nil once an agent is accepted (AgentConnected).
	refusal *syncserver.Refusal
	// pruneHeard says this process heard how the agent's last prune went;
	// blocked is the prune its deletion brake holds (nil: none).
	pruneHeard bool
	blocked    *syncserver.PruneBlocked
	// confirmSent is the epoch whose prune confirmation was sent.
	confirmSent uint64
	// push says the connection is the hub's own to a Push member's
	// apiserver, not an agent's stream (PushUp); pushProblem is why the
	// hub cannot push to it at all (PushUnavailable), nil once it can.
	push        bool
	pushProblem *pushProblem
}

// pushProblem is why the hub cannot reach a Push member.
type pushProblem struct {
	reason, message string
}

// Tracker records agent lifecycle events from the sync server and wakes the
// controller for the cluster when something it writes may have changed. It
// implements the sync server's AgentSink.
type Tracker struct {
	mu     sync.Mutex
	agents map[string]*agentState
	// lastWake is when each cluster was last enqueued for a heartbeat.
	lastWake map[string]time.Time
	// events wakes the controller; buffered, and a full buffer drops the
	// wake-up because the controller's own requeue catches up.
	events chan event.GenericEvent
	// wakeInterval bounds heartbeat-only wake-ups per cluster.
	wakeInterval time.Duration
}

var _ syncserver.AgentSink = (*Tracker)(nil)

// NewTracker returns a Tracker that wakes the controller for heartbeat-only
// changes at most every wakeInterval per cluster.
func NewTracker(wakeInterval time.Duration) *Tracker {
	return &Tracker{
		agents:       map[string]*agentState{},
		lastWake:     map[string]time.Time{},
		events:       make(chan event.GenericEvent, 1024),
		wakeInterval: wakeInterval,
	}
}

func (t *Tracker) state(cluster string) *agentState {
	s := t.agents[cluster]
	if s == nil {
		s = &agentState{}
		t.agents[cluster] = s
	}
	return s
}

// wake enqueues cluster without blocking.
func (t *Tracker) wake(cluster string) {
	t.lastWake[cluster] = time.Now()
	select {
	case t.events <- event.GenericEvent{Object: &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}}:
	default:
	}
}

// AgentConnected implements AgentSink.
func (t *Tracker) AgentConnected(cluster string, info syncserver.AgentInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	s.connected = true
	s.info = info
	s.lastHeartbeat = info.ConnectedAt
	if info.Resources != nil {
		s.resources = info.Resources
	}
	s.disconnectReason = ""
	s.refusal = nil
	s.push = false
	s.pushProblem = nil
	metrics.InitCluster(cluster)
	t.wake(cluster)
}

// AgentHeartbeat implements AgentSink.
func (t *Tracker) AgentHeartbeat(cluster string, hb syncserver.Heartbeat) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	// A heartbeat after a silence longer than the wake interval may bring a
	// cluster back: wake the controller at once rather than at its next
	// periodic look.
	silent := hb.Time.Sub(s.lastHeartbeat) > t.wakeInterval
	s.lastHeartbeat = hb.Time
	changed := false
	if hb.Resources != nil {
		changed = !equality.Semantic.DeepEqual(s.resources, hb.Resources)
		s.resources = hb.Resources
	}
	if silent || (changed && time.Since(t.lastWake[cluster]) >= t.wakeInterval) {
		t.wake(cluster)
	}
}

// AgentDisconnected implements AgentSink.
func (t *Tracker) AgentDisconnected(cluster string, reason error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	s.connected = false
	if reason != nil {
		s.disconnectReason = reason.Error()
	}
	t.wake(cluster)
}

// AgentRefused implements AgentSink. A refusing agent never connected, so
// what is known of a connected agent of the cluster stays as it is.
func (t *Tracker) AgentRefused(cluster string, r syncserver.Refusal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	s.refusal = &r
	t.wake(cluster)
}

// AgentPruneBlocked implements AgentSink.
func (t *Tracker) AgentPruneBlocked(cluster string, b syncserver.PruneBlocked) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	s.pruneHeard = true
	s.blocked = &b
	t.wake(cluster)
}

// AgentPruned implements AgentSink.
func (t *Tracker) AgentPruned(cluster string, _ uint64, _ bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	if s.pruneHeard && s.blocked == nil {
		// Nothing a reader acts on changed: no wake-up.
		return
	}
	s.pruneHeard = true
	s.blocked = nil
	t.wake(cluster)
}

// markConfirmSent records that the prune of epoch was confirmed to
// cluster's agent, so it is confirmed once.
func (t *Tracker) markConfirmSent(cluster string, epoch uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state(cluster).confirmSent = epoch
}

// snapshot returns a copy of cluster's state; ok is false when no agent of
// cluster was ever heard of by this process.
func (t *Tracker) snapshot(cluster string) (agentState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.agents[cluster]
	if !ok {
		return agentState{}, false
	}
	return *s, true
}

// heartbeats returns the last heartbeat of every cluster heard from that
// still exists (see forgetHeartbeat).
func (t *Tracker) heartbeats() map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(t.agents))
	for cluster, s := range t.agents {
		if !s.lastHeartbeat.IsZero() {
			out[cluster] = s.lastHeartbeat
		}
	}
	return out
}

// forgetHeartbeat drops the last heartbeat of a cluster whose
// MemberCluster is gone, so its age is no longer exported; a heartbeat
// that arrives later (an agent still connected) records it again.
func (t *Tracker) forgetHeartbeat(cluster string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.agents[cluster]; ok {
		s.lastHeartbeat = time.Time{}
	}
}

// Events is the channel the controller watches.
func (t *Tracker) Events() <-chan event.GenericEvent { return t.events }

// PushUp says the hub reached Push member cluster's apiserver (its /readyz
// answered) at now; the push engine calls it every heartbeat interval. The
// first call, or one after anything else changed the cluster's state (an
// agent's stream ending, PushDown, PushUnavailable), connects the cluster
// as AgentConnected does; later ones are heartbeats.
func (t *Tracker) PushUp(cluster string, info syncserver.AgentInfo, now time.Time, resources *flotillav1.ResourceSummary) {
	t.mu.Lock()
	s := t.state(cluster)
	up := s.connected && s.push && s.pushProblem == nil
	t.mu.Unlock()
	if !up {
		info.ConnectedAt = now
		if resources != nil {
			info.Resources = resources
		}
		t.AgentConnected(cluster, info)
		t.mu.Lock()
		s.push = true
		t.mu.Unlock()
		return
	}
	t.AgentHeartbeat(cluster, syncserver.Heartbeat{Time: now, Resources: resources})
}

// PushDown says the hub lost Push member cluster's apiserver (or stopped
// pushing to it). It changes nothing when the cluster's connection is not
// the hub's own push (an agent's stream holds it).
func (t *Tracker) PushDown(cluster string, reason error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	if !s.push || !s.connected {
		return
	}
	s.connected = false
	if reason != nil {
		s.disconnectReason = reason.Error()
	}
	t.wake(cluster)
}

// PushUnavailable says the hub cannot push to member cluster at all
// (reason, e.g. ReasonKubeconfigInvalid, and a message naming the Secret):
// the member is Ready False with that reason until PushUp. A push
// connection the hub held ends.
func (t *Tracker) PushUnavailable(cluster, reason, message string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(cluster)
	if p := s.pushProblem; p != nil && p.reason == reason && p.message == message {
		return
	}
	s.pushProblem = &pushProblem{reason: reason, message: message}
	if s.push {
		s.connected = false
		s.disconnectReason = message
	}
	t.wake(cluster)
}
