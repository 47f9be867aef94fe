package setup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// The agent's process: what controller-runtime's manager did for it,
// without controller-runtime's manager, cache and client, whose packages
// link client-go's scheme of every API group (docs/architecture.md,
// "Executable size"). It runs
//   - always, on every replica: the probe, metrics and pprof servers and
//     the cache of what Flotilla applied (a standby's cache is warm when
//     it takes over);
//   - on the leader only (runnables whose NeedLeaderElection says so), or
//     at once without leader election: the stream, the Work controller,
//     the health runner, the summarizer, the join keeper.
//
// A replica that loses its Lease returns an error saying "leader election
// lost" (internal/reexec starts it over in place). When its context ends
// it stops the leader's runnables first and only then releases the Lease,
// so two replicas never run them at once; a runnable that fails stops the
// whole process with its error, as the manager did.

// runnable is a part the process runs until its context ends.
type runnable interface {
	Start(ctx context.Context) error
}

// leaderOnly is a runnable that says whether it runs on the leader only.
type leaderOnly interface {
	NeedLeaderElection() bool
}

// runnableFunc is a function as a runnable on every replica.
type runnableFunc func(ctx context.Context) error

func (f runnableFunc) Start(ctx context.Context) error { return f(ctx) }

// elector is the leader election the process runs (pkg/leader.Elector).
type elector interface {
	// Run campaigns until ctx ends. Once this replica leads it calls
	// onStarted with a context that ends when leading stops (ctx ended or
	// the Lease was lost), waits for it to return, releases the Lease and
	// returns: nil when ctx ended, an error saying "leader election lost"
	// when the Lease was lost.
	Run(ctx context.Context, onStarted func(context.Context), onStopped func()) error
}

// cacheSyncTimeout bounds the cache's first list of every kind
// (controller-runtime's CacheSyncTimeout).
const cacheSyncTimeout = 2 * time.Minute

// gracefulShutdown bounds how long the process waits for its runnables
// to stop once its context ended (controller-runtime's default).
const gracefulShutdown = 30 * time.Second

type process struct {
	log logr.Logger
	// elector is nil without leader election: the leader's runnables
	// start at once.
	elector elector
	// cache runs on every replica; the leader's runnables start once it
	// has synced.
	cache interface {
		runnable
		WaitForSync(ctx context.Context) error
	}
	// syncTimeout bounds the cache's sync (cacheSyncTimeout when zero).
	syncTimeout        time.Duration
	everywhere, leader []runnable
	// Probes: /healthz and /readyz, with named checks.
	probeAddr     string
	healthz       map[string]healthz.Checker
	readyz        map[string]healthz.Checker
	pprofAddr     string
	elected       chan struct{}
	electedClosed sync.Once
}

func newProcess(log logr.Logger) *process {
	return &process{
		log:     log,
		healthz: map[string]healthz.Checker{},
		readyz:  map[string]healthz.Checker{},
		elected: make(chan struct{}),
	}
}

// Add adds r: on the leader only when it says so.
func (p *process) Add(r runnable) {
	if l, ok := r.(leaderOnly); ok && l.NeedLeaderElection() {
		p.leader = append(p.leader, r)
		return
	}
	p.everywhere = append(p.everywhere, r)
}

// Elected is closed once this replica leads (at once without leader
// election).
func (p *process) Elected() <-chan struct{} { return p.elected }

func (p *process) markElected() { p.electedClosed.Do(func() { close(p.elected) }) }

// Start runs the process until ctx ends or a part fails.
func (p *process) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel()
	}
	var wg sync.WaitGroup
	run := func(ctx context.Context, r runnable) {
		wg.Go(func() {
			if err := r.Start(ctx); err != nil {
				fail(err)
			}
		})
	}

	listeners, err := p.listen()
	if err != nil {
		return err
	}
	for _, s := range listeners {
		run(ctx, s)
	}
	for _, r := range p.everywhere {
		run(ctx, r)
	}
	if p.cache != nil {
		run(ctx, p.cache)
		// A cache that cannot list (a missing permission, a kind the
		// apiserver does not serve) fails the start, naming the kinds, as
		// controller-runtime's controllers fail after their sync timeout.
		timeout := p.syncTimeout
		if timeout == 0 {
			timeout = cacheSyncTimeout
		}
		syncCtx, synced := context.WithTimeout(ctx, timeout)
		err := p.cache.WaitForSync(syncCtx)
		synced()
		if err != nil {
			outer := ctx.Err()
			cancel()
			p.wait(&wg, "the servers and the cache")
			if outer != nil {
				return p.firstError(errs)
			}
			return fmt.Errorf("the agent's cache: %w", err)
		}
	}

	// lead runs the leader's runnables until lctx ends and returns once
	// they all stopped: the elector releases the Lease only then, so two
	// replicas never run them at once.
	lead := func(lctx context.Context) {
		p.markElected()
		var leaderWG sync.WaitGroup
		for _, r := range p.leader {
			leaderWG.Go(func() {
				if err := r.Start(lctx); err != nil {
					fail(err)
				}
			})
		}
		p.wait(&leaderWG, "the leader's runnables")
	}
	if p.elector == nil {
		led := make(chan struct{})
		go func() {
			defer close(led)
			lead(ctx)
		}()
		<-ctx.Done()
		<-led
		p.wait(&wg, "the servers and the cache")
		return p.firstError(errs)
	}
	// The elector ends leading when ctx ends (or a runnable failed and
	// cancelled it) or when the Lease is lost: then it returns an error
	// saying "leader election lost".
	if err := p.elector.Run(ctx, lead, nil); err != nil {
		fail(err)
	} else if ctx.Err() == nil {
		fail(errors.New("leader election lost: the elector stopped"))
	}
	cancel()
	p.wait(&wg, "the servers and the cache")
	return p.firstError(errs)
}

func (p *process) firstError(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// wait waits for wg up to gracefulShutdown.
func (p *process) wait(wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(gracefulShutdown):
		p.log.Info("stopping took too long; going on without waiting", "what", what, "waited", gracefulShutdown)
	}
}

// AddHealthzCheck and AddReadyzCheck add named probe checks.
func (p *process) AddHealthzCheck(name string, c healthz.Checker) { p.healthz[name] = c }
func (p *process) AddReadyzCheck(name string, c healthz.Checker)  { p.readyz[name] = c }

// listen binds the probe and pprof addresses ("" or "0": off) before
// anything starts, so a taken port fails the start at once.
func (p *process) listen() ([]runnable, error) {
	var out []runnable
	if on(p.probeAddr) {
		mux := http.NewServeMux()
		for path, checks := range map[string]map[string]healthz.Checker{"/healthz": p.healthz, "/readyz": p.readyz} {
			h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
			mux.Handle(path, h)
			mux.Handle(path+"/", h)
		}
		s, err := serve("probes", p.probeAddr, mux)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if on(p.pprofAddr) {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		s, err := serve("pprof", p.pprofAddr, mux)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func on(addr string) bool { return addr != "" && addr != "0" }

// serve binds addr for h and returns the runnable that serves it.
func serve(what, addr string, h http.Handler) (runnable, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for %s on %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return runnableFunc(func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving %s on %s: %w", what, addr, err)
		}
		return nil
	}), nil
}
