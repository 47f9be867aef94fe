package setup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// The hub's probes (docs/architecture.md, "Probes").
//
// /healthz is a ping: the process answers. It asks nothing of the
// apiserver, so a slow or unreachable apiserver never gets the hub
// restarted (a restart would not make it faster).
//
// /readyz holds named checks, each listed by /readyz?verbose and each
// telling what is missing at /readyz/<name>:
//   - caches: the manager's informers have listed and synced; until then
//     the webhook and the controllers would read an empty cache.
//   - webhook (with --webhook-bind-address): the webhook server accepts
//     TLS connections. Every replica serves the webhook, so a standby is
//     ready once this and caches pass.
//   - sync-server (with --sync-bind-address): on the leader, the sync
//     server listens and accepts agents' streams; a standby passes (the
//     sync server runs on the leader only).
const (
	CheckCaches     = "caches"
	CheckWebhook    = "webhook"
	CheckSyncServer = "sync-server"
)

// cacheCheckTimeout bounds how long one /readyz waits for the caches: a
// probe must answer within its timeout whatever the apiserver does.
const cacheCheckTimeout = 200 * time.Millisecond

// addProbes registers the hub's liveness and readiness checks on mgr.
func addProbes(mgr ctrl.Manager, opts Options, sync *syncRunnable) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck(CheckCaches, cachesSynced(mgr)); err != nil {
		return err
	}
	if opts.WebhookAddr != "" {
		if err := mgr.AddReadyzCheck(CheckWebhook, mgr.GetWebhookServer().StartedChecker()); err != nil {
			return err
		}
	}
	if sync != nil {
		if err := mgr.AddReadyzCheck(CheckSyncServer, syncServing(mgr.Elected(), sync.state)); err != nil {
			return err
		}
	}
	return nil
}

// cachesSynced passes once every informer the manager's cache runs has
// synced. An informer added later (a controller started on election, a
// kind first read by the webhook) fails it until that one has synced too.
func cachesSynced(mgr ctrl.Manager) healthz.Checker {
	c := mgr.GetCache()
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), cacheCheckTimeout)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the hub's caches have not synced yet: the manager is still listing and watching its kinds (MyApps, Works, MemberClusters...) in the hub apiserver; if this lasts, check that the apiserver answers and that the hub's RBAC lets it list and watch them")
		}
		return nil
	}
}

// syncServing passes on a replica that is not the leader (elected still
// open), and on the leader once the sync server serves.
func syncServing(elected <-chan struct{}, state *syncState) healthz.Checker {
	return func(*http.Request) error {
		select {
		case <-elected:
			return state.check()
		default:
			return nil
		}
	}
}

// syncState is where the leader's sync server stands, for /readyz.
type syncState struct {
	mu      sync.Mutex
	serving bool
	// step says what the leader is doing before it serves, and err why
	// the last attempt at it failed (nil when none did).
	step  string
	err   error
	since time.Time
}

func newSyncState() *syncState {
	return &syncState{step: "waiting to start the sync server", since: time.Now()}
}

// set records the current step; serving says the server accepts streams.
func (s *syncState) set(step string, serving bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if step != s.step || serving != s.serving {
		s.since = time.Now()
	}
	s.step, s.serving, s.err = step, serving, err
}

func (s *syncState) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		return nil
	}
	msg := fmt.Sprintf("this replica leads but does not serve agents yet: %s (for %s)", s.step, time.Since(s.since).Round(time.Second))
	if s.err != nil {
		msg += fmt.Sprintf("; last error: %v", s.err)
	}
	return errors.New(msg)
}
