package leader

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// ErrLost is what Run returns, wrapped, when this replica stopped leading
// while its context was still live: a renewal did not succeed within
// RenewDeadline (the apiserver was unreachable, or another replica holds
// the Lease). The caller should exit, as controller-runtime's manager
// does, and start again as a candidate.
var ErrLost = errors.New("leader election lost")

// fieldOwner is the field manager the Elector's writes to the Lease
// record.
const fieldOwner = "leader-election"

// Config configures an Elector.
type Config struct {
	// Client reads and writes the Lease as a typed coordination.k8s.io/v1
	// Lease, so its scheme must know coordinationv1.
	Client kclient.Client
	// Key is the Lease's namespace and name.
	Key kclient.Key
	// Identity is this process's holder identity (NewIdentity): unique to
	// the process, so that a restarted replica does not mistake the Lease
	// its old process held for its own.
	Identity string
	// LeaseDuration is how long a candidate waits without seeing the
	// Lease change before it takes it from a leader that stopped renewing.
	// It is measured on the candidate's own clock from when it saw the
	// last change, not from the renew time the leader wrote, so clock
	// skew between replicas does not matter. The Lease records it in
	// whole seconds, rounded up.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a failed
	// renewal before it stops leading. It is less than LeaseDuration, so
	// a leader cut off from the apiserver stops before another replica
	// may take over.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews the Lease and candidates
	// try to take it (waiting up to 2.2 times it, with jitter).
	RetryPeriod time.Duration
	// Name is the name label of the leader_election_master_status gauge;
	// empty is Key.Name, as controller-runtime labels it with the Lease's
	// name.
	Name string
	// Log logs acquisitions, losses and releases; the zero Logger logs
	// nothing.
	Log logr.Logger
}

// validate says which field is wrong, in the terms client-go's
// NewLeaderElector checks them.
func (c Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("leader election: Client is nil")
	case c.Key.Namespace == "" || c.Key.Name == "":
		return fmt.Errorf("leader election: Key %q: the Lease needs a namespace and a name", c.Key.String())
	case c.Identity == "":
		return errors.New("leader election: Identity is empty")
	case c.LeaseDuration <= 0:
		return fmt.Errorf("leader election: LeaseDuration %s: must be positive", c.LeaseDuration)
	case c.RenewDeadline <= 0:
		return fmt.Errorf("leader election: RenewDeadline %s: must be positive", c.RenewDeadline)
	case c.RetryPeriod <= 0:
		return fmt.Errorf("leader election: RetryPeriod %s: must be positive", c.RetryPeriod)
	case c.LeaseDuration < time.Second:
		// Rounded up to a whole second it would be longer than the
		// caller asked for; client-go rounds it down, to 0, which makes
		// every candidate take the Lease at once.
		return fmt.Errorf("leader election: LeaseDuration %s: must be at least 1s (a Lease records it in whole seconds)", c.LeaseDuration)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("leader election: LeaseDuration %s must exceed RenewDeadline %s", c.LeaseDuration, c.RenewDeadline)
	case float64(c.RenewDeadline) <= jitter*float64(c.RetryPeriod):
		return fmt.Errorf("leader election: RenewDeadline %s must exceed 1.2 times RetryPeriod %s", c.RenewDeadline, c.RetryPeriod)
	}
	return nil
}

// Elector elects one leader among the replicas that run one on the same
// Lease. It follows client-go's LeaderElector with ReleaseOnCancel, so
// that it and client-go's (an agent of an older version during a rolling
// upgrade, whose election was controller-runtime's) take turns correctly
// on one Lease, but reads and writes the Lease through
// kclient: client-go's needs its typed clients, which link its scheme of
// every API group.
//
// It differs from client-go's in three ways, each safer: Run waits for
// the leader's work (onStarted) to return before it releases the Lease, so
// the next leader cannot start while this one's work still runs; it
// releases only a Lease that still names it, so it never clears another
// holder's; and IsLeader turns false as soon as leading stops, not when
// the Lease is next seen held by another.
type Elector struct {
	cfg Config
	// seconds is LeaseDuration as the Lease records it.
	seconds int32
	log     logr.Logger
	gauge   prometheus.Collector
	ran     atomic.Bool
	leading atomic.Bool

	// What Run's goroutine, the only one to touch them, last saw of the
	// Lease: the Lease itself, whose resourceVersion the next write is
	// conditional on, its spec as JSON, and when on the local clock the
	// spec last changed. Like client-go, a candidate judges the holder's
	// Lease expired by that local time, never by the renew time written
	// in it.
	lease        *coordinationv1.Lease
	observed     []byte
	observedTime time.Time
}

// New returns an Elector of cfg, or says which of cfg's fields is wrong.
func New(cfg Config) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Key.Name
	}
	e := &Elector{
		cfg:     cfg,
		seconds: int32((cfg.LeaseDuration + time.Second - 1) / time.Second),
		log:     cfg.Log.WithValues("lease", cfg.Key.String(), "identity", cfg.Identity),
	}
	// The name, help and label are controller-runtime's (and client-go's
	// component-base's), so dashboards and alerts on either keep working.
	e.gauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "leader_election_master_status",
		Help:        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
		ConstLabels: prometheus.Labels{"name": cfg.Name},
	}, func() float64 {
		if e.leading.Load() {
			return 1
		}
		return 0
	})
	return e, nil
}

// Identity is this replica's holder identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader says whether this replica leads: from when it took the Lease
// until it stops renewing it.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Collector is the leader_election_master_status gauge, 1 while this
// replica leads and 0 otherwise, for the caller to register with its own
// registry (none is registered globally, so that two Electors in one
// process, as in tests, do not collide).
func (e *Elector) Collector() prometheus.Collector { return e.gauge }

// Run tries to take the Lease every RetryPeriod (with jitter) until it
// does or ctx ends. Once it leads it calls onStarted, in a goroutine of
// its own, with a context that ends when leading stops, and renews the
// Lease every RetryPeriod. Leading stops when ctx ends or when no renewal
// succeeds within RenewDeadline. Then Run waits for onStarted to return,
// releases the Lease if it still names this replica (so that another
// replica takes over at once instead of after LeaseDuration), calls
// onStopped and returns: nil when ctx ended, an error wrapping ErrLost
// when the Lease was lost. onStopped is called only after onStarted was;
// either may be nil. onStarted must return once its context ends. An
// Elector runs once.
func (e *Elector) Run(ctx context.Context, onStarted func(context.Context), onStopped func()) error {
	if !e.ran.CompareAndSwap(false, true) {
		return errors.New("leader election: an Elector runs once")
	}
	if !e.acquire(ctx) {
		return nil
	}
	e.leading.Store(true)
	e.log.Info("acquired the leader Lease")
	leadCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if onStarted != nil {
			onStarted(leadCtx)
		}
	}()
	lost := e.lead(ctx)
	e.leading.Store(false)
	stop()
	if lost != nil {
		e.log.Info("stopped leading: the leader Lease could not be renewed", "renewDeadline", e.cfg.RenewDeadline, "reason", lost.Error())
	} else {
		e.log.Info("stopped leading: shutting down")
	}
	// The work the Lease guards must have stopped before another replica
	// can take the Lease, which releasing it lets happen at once.
	<-done
	e.release(ctx)
	if onStopped != nil {
		onStopped()
	}
	if lost != nil {
		return fmt.Errorf("%w: the Lease %s was not renewed within %s: %w", ErrLost, e.cfg.Key, e.cfg.RenewDeadline, lost)
	}
	return nil
}

// acquire tries to take or renew the Lease until it does (true) or ctx
// ends (false).
func (e *Elector) acquire(ctx context.Context) bool {
	e.log.Info("trying to acquire the leader Lease")
	for {
		// An apiserver that never answers must not hold up the next try.
		tryCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
		err := e.tryAcquireOrRenew(tryCtx)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		e.logFailure("not acquired", err)
		// Like client-go's, a candidate waits between one and 2.2
		// RetryPeriods (jitter, in timings.go), so that candidates started
		// together do not all try at once.
		wait := e.cfg.RetryPeriod + time.Duration(rand.Float64()*jitter*float64(e.cfg.RetryPeriod))
		if !sleep(ctx, wait) {
			return false
		}
	}
}

// lead renews the Lease every RetryPeriod until ctx ends (nil) or a
// renewal fails for RenewDeadline (the last failure's error).
func (e *Elector) lead(ctx context.Context) error {
	for sleep(ctx, e.cfg.RetryPeriod) {
		if err := e.renew(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// renew tries to renew the Lease every RetryPeriod until it does (nil)
// or RenewDeadline passes (the last failure's error). The deadline also
// ends a request in flight, so a leader cut off from its apiserver stops
// leading on time.
func (e *Elector) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	for {
		err := e.tryAcquireOrRenew(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		e.logFailure("not renewed", err)
		if !sleep(ctx, e.cfg.RetryPeriod) {
			return err
		}
	}
}

// errHeld says the Lease is held by another replica whose hold has not
// expired.
type errHeld string

func (h errHeld) Error() string {
	return fmt.Sprintf("held by %s", string(h))
}

// logFailure logs why a try failed: quietly when another replica holds
// the Lease, which is what candidates see every try.
func (e *Elector) logFailure(msg string, err error) {
	var held errHeld
	if errors.As(err, &held) {
		e.log.V(1).Info(msg, "holder", string(held))
		return
	}
	e.log.Error(err, msg)
}

// tryAcquireOrRenew takes or renews the Lease once: it creates a missing
// Lease, and takes one that is held by nobody, by this replica, or by a
// holder whose record has not changed for its lease duration on the local
// clock. Every write is conditional on the resourceVersion read, so of
// two candidates writing at once only one succeeds.
func (e *Elector) tryAcquireOrRenew(ctx context.Context) error {
	now := time.Now()
	// The leader renews from the Lease it last wrote, without reading it
	// first, as long as its hold has not expired; a conflict (someone
	// else wrote the Lease) falls back to reading it.
	if e.lease != nil && holderOf(e.lease) == e.cfg.Identity && e.valid(now) {
		lease := e.lease.DeepCopy()
		e.claim(lease, now)
		err := e.cfg.Client.Update(ctx, lease, fieldOwner)
		if err == nil {
			e.see(lease)
			return nil
		}
		e.log.V(1).Info("renewing the Lease last written failed; reading it", "reason", err.Error())
	}

	lease := &coordinationv1.Lease{}
	if err := e.cfg.Client.Get(ctx, e.cfg.Key, lease); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the Lease: %w", err)
		}
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.cfg.Key.Namespace, Name: e.cfg.Key.Name}}
		e.claim(lease, now)
		zero := int32(0)
		lease.Spec.LeaseTransitions = &zero
		if err := e.cfg.Client.Create(ctx, lease, fieldOwner); err != nil {
			return fmt.Errorf("creating the Lease: %w", err)
		}
		e.see(lease)
		return nil
	}
	e.see(lease)
	if h := holderOf(lease); h != "" && h != e.cfg.Identity && e.valid(now) {
		return errHeld(h)
	}
	e.claim(lease, now)
	if err := e.cfg.Client.Update(ctx, lease, fieldOwner); err != nil {
		return fmt.Errorf("writing the Lease: %w", err)
	}
	e.see(lease)
	return nil
}

// claim sets lease's spec to this replica's hold, renewed at now. A hold
// it already had keeps its acquire time and transitions; one taken from
// another holder (or from none) counts one more transition. The rest of
// the spec is cleared, as client-go does.
func (e *Elector) claim(lease *coordinationv1.Lease, now time.Time) {
	old := lease.Spec
	id, seconds, at := e.cfg.Identity, e.seconds, metav1.NewMicroTime(now)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       &id,
		LeaseDurationSeconds: &seconds,
		AcquireTime:          &at,
		RenewTime:            &at,
	}
	transitions := int32(0)
	if old.LeaseTransitions != nil {
		transitions = *old.LeaseTransitions
	}
	if holderOf(lease) == id {
		if old.AcquireTime != nil {
			spec.AcquireTime = old.AcquireTime
		}
	} else {
		transitions++
	}
	spec.LeaseTransitions = &transitions
	lease.Spec = spec
}

// see records lease as the last seen, and the local time if its spec
// changed since the last one.
func (e *Elector) see(lease *coordinationv1.Lease) {
	e.lease = lease
	raw, err := json.Marshal(lease.Spec)
	if err != nil || !bytes.Equal(raw, e.observed) {
		e.observed, e.observedTime = raw, time.Now()
	}
}

// valid says whether the hold in the Lease last seen has not expired at
// now: its lease duration has not passed since its spec last changed.
func (e *Elector) valid(now time.Time) bool {
	seconds := int32(0)
	if e.lease.Spec.LeaseDurationSeconds != nil {
		seconds = *e.lease.Spec.LeaseDurationSeconds
	}
	return e.observedTime.Add(time.Duration(seconds) * time.Second).After(now)
}

// release gives up the Lease, if it still names this replica, so that
// another replica takes it on its next try: client-go's release, an empty
// holder with a lease duration of one second. A conflict (a renewal that
// was in flight when ctx ended completed after all) is retried; the whole
// release gets RenewDeadline, even though ctx has ended.
func (e *Elector) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	defer cancel()
	for {
		lease := &coordinationv1.Lease{}
		if err := e.cfg.Client.Get(ctx, e.cfg.Key, lease); err != nil {
			e.log.Error(err, "not releasing the leader Lease: reading it failed")
			return
		}
		if h := holderOf(lease); h != e.cfg.Identity {
			e.log.Info("not releasing the leader Lease: another replica holds it", "holder", h)
			return
		}
		empty, second, now := "", int32(1), metav1.NewMicroTime(time.Now())
		lease.Spec = coordinationv1.LeaseSpec{
			HolderIdentity:       &empty,
			LeaseDurationSeconds: &second,
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     lease.Spec.LeaseTransitions,
		}
		err := e.cfg.Client.Update(ctx, lease, fieldOwner)
		if err == nil {
			e.see(lease)
			e.log.Info("released the leader Lease")
			return
		}
		if !apierrors.IsConflict(err) || ctx.Err() != nil {
			e.log.Error(err, "releasing the leader Lease failed; another replica takes it once its lease duration passes")
			return
		}
	}
}

// holderOf is lease's holder identity, empty for none.
func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
