package setup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/works"
)

// The agent's probes (docs/architecture.md, "Probes").
//
// /healthz is a ping: the process answers. Neither the member apiserver
// nor the hub is asked, so neither being slow or away gets the agent
// restarted.
//
// /readyz holds two named checks, each listed by /readyz?verbose and each
// telling what is missing at /readyz/<name>:
//   - member-apiserver: the member apiserver answers /readyz, the same
//     check as the member gate (pkg/memberprobe). Without it no replica
//     can apply or repair anything.
//   - hub-stream: a standby passes; the leader passes while its stream to
//     the hub is open or while it runs autonomously (the hub is
//     unreachable: it keeps applying the Works it holds and deletes
//     nothing). It fails only when the agent and the hub refused each
//     other, which a person must resolve: the agent refused a hub of
//     another fleet, or the hub refused the agent (PERMISSION_DENIED) and
//     it stood down. A hub outage never makes the agent unready: an
//     unready agent on every member, each holding its PodDisruptionBudget
//     and failing every rollout, because of one hub would turn a hub
//     outage into a fleet-wide maintenance stop, while the agent is doing
//     its job.
const (
	CheckMemberAPIServer = "member-apiserver"
	CheckHubStream       = "hub-stream"
)

// Autonomy is reported (logged) once the leader's stream has been down
// this long: shorter drops are reconnects (a hub restart, a connection
// moved at its maximum age), not news.
const autonomyAfter = 10 * time.Second

// addProbes registers the agent's liveness and readiness checks on p.
func addProbes(p *process, member func(ctx context.Context) error, host string, stream *streamWatch) {
	p.AddHealthzCheck("ping", healthz.Ping)
	p.AddReadyzCheck(CheckMemberAPIServer, func(req *http.Request) error {
		if err := member(req.Context()); err != nil {
			return fmt.Errorf("the member apiserver at %s does not answer: %w; this agent can apply and repair nothing until it does", host, err)
		}
		return nil
	})
	elected := p.Elected()
	p.AddReadyzCheck(CheckHubStream, func(*http.Request) error {
		select {
		case <-elected:
			return stream.check()
		default:
			// A standby holds no stream.
			return nil
		}
	})
}

// standDownRecorder is the Store as the sync client's Applier, noting
// when the hub refused this agent and the Store stood down.
type standDownRecorder struct {
	*works.Store
	stoodDown atomic.Bool
}

// StandDown implements syncclient.Stander.
func (r *standDownRecorder) StandDown(ctx context.Context) {
	r.stoodDown.Store(true)
	r.Store.StandDown(ctx)
}

// streamWatch follows the leader's stream to the hub: it answers the
// hub-stream check and reports autonomy (see Start).
type streamWatch struct {
	state func() syncclient.State
	store *standDownRecorder
	hub   string
	log   logr.Logger
	// interval between looks at the stream (a second by default).
	interval time.Duration
	// after is autonomyAfter (tests shorten it).
	after time.Duration

	mu sync.Mutex
	// autonomous says autonomy was reported and not yet ended.
	autonomous bool
	// downSince is when the stream was last seen down after being up,
	// or when the watch started; zero while it is up.
	downSince time.Time
	// everConnected says a stream was accepted since this agent started.
	everConnected bool
}

func newStreamWatch(state func() syncclient.State, store *standDownRecorder, hub string, log logr.Logger) *streamWatch {
	return &streamWatch{state: state, store: store, hub: hub, log: log, interval: time.Second, after: autonomyAfter}
}

// NeedLeaderElection: only the leader holds the stream.
func (w *streamWatch) NeedLeaderElection() bool { return true }

// Start looks at the stream every interval until ctx ends and logs when
// the agent starts and stops running autonomously.
func (w *streamWatch) Start(ctx context.Context) error {
	w.mu.Lock()
	w.downSince = time.Now()
	w.mu.Unlock()
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.observe(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// observe updates the watch from the client's state at now.
func (w *streamWatch) observe(now time.Time) {
	st := w.state()
	w.mu.Lock()
	defer w.mu.Unlock()
	if st.Connected {
		w.store.stoodDown.Store(false)
		if w.autonomous {
			w.log.Info("the stream to the hub is back: autonomy ended; the hub's snapshot brings this member up to date", "hub", w.hub, "autonomousFor", now.Sub(w.downSince).Round(time.Second).String())
		}
		w.autonomous, w.everConnected, w.downSince = false, true, time.Time{}
		return
	}
	if w.downSince.IsZero() {
		w.downSince = now
	}
	if w.autonomous || st.Refusal != "" || w.store.stoodDown.Load() || now.Sub(w.downSince) < w.after {
		return
	}
	w.autonomous = true
	held := len(w.store.Names())
	if w.everConnected {
		w.log.Info("the hub is unreachable: running autonomously, keeping the Works this agent holds applied and repairing their drift, deleting nothing, until the stream is back",
			"hub", w.hub, "works", held, "streamDownFor", now.Sub(w.downSince).Round(time.Second).String())
		return
	}
	w.log.Info("no stream to the hub since this agent became leader: running autonomously with the Works it holds (none after a restart: the objects it applied run on, unrepaired, until the hub's snapshot)",
		"hub", w.hub, "works", held, "waitingFor", now.Sub(w.downSince).Round(time.Second).String())
}

// check is the hub-stream readiness check of the leader.
func (w *streamWatch) check() error {
	st := w.state()
	if st.Connected {
		return nil
	}
	if st.Refusal != "" {
		return fmt.Errorf("this agent refused the hub at %s: %s; it applies nothing that hub sends until a person decides (--accept-fleet-id, or point it at its own hub)", w.hub, st.Refusal)
	}
	if w.store.stoodDown.Load() {
		return errors.New("the hub at " + w.hub + " refused this agent (PERMISSION_DENIED: its MemberCluster is Pending, Denied or in Push mode, or its certificate is revoked): it stood down and applies nothing until the hub accepts it; see the MemberCluster on the hub")
	}
	// Reconnecting, or autonomous: either way the agent does its job.
	return nil
}
