package leader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/leader"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// The tests' timings: short, so that a takeover after LeaseDuration takes
// seconds, and valid (RenewDeadline below LeaseDuration, above 1.2
// RetryPeriods).
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 200 * time.Millisecond
)

// converge bounds every wait for something the electors do within a few
// RetryPeriods or one LeaseDuration; generous, for a loaded machine.
const converge = 30 * time.Second

// newClient is a direct client of the test apiserver whose scheme knows
// the Lease, as the agent's will.
func newClient(t *testing.T) kclient.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := direct.New(sharedEnv.Config(t), s)
	if err != nil {
		t.Fatalf("creating the direct client: %v", err)
	}
	return c
}

var leases atomic.Int32

// leaseKey names a Lease of the test's own.
func leaseKey() kclient.Key {
	return kclient.Key{Namespace: "default", Name: fmt.Sprintf("elector-%d-%d", time.Now().UnixNano()%100000, leases.Add(1))}
}

var errCut = errors.New("cut off from the apiserver")

// cuttable is a client whose every call fails once it is cut: the replica
// using it has stopped (killed, or cut off from its apiserver), so it
// neither renews nor releases its Lease.
type cuttable struct {
	kclient.Client
	cut atomic.Bool
}

func (c *cuttable) Get(ctx context.Context, key kclient.Key, obj kclient.Object) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Get(ctx, key, obj)
}

func (c *cuttable) List(ctx context.Context, list kclient.ObjectList, opts kclient.ListOptions) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.List(ctx, list, opts)
}

func (c *cuttable) Create(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Create(ctx, obj, fieldOwner)
}

func (c *cuttable) Update(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Update(ctx, obj, fieldOwner)
}

func (c *cuttable) Patch(ctx context.Context, obj kclient.Object, pt types.PatchType, data []byte) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Patch(ctx, obj, pt, data)
}

func (c *cuttable) Delete(ctx context.Context, obj kclient.Object, opts kclient.DeleteOptions) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Delete(ctx, obj, opts)
}

func (c *cuttable) ForceApply(ctx context.Context, obj *unstructured.Unstructured, fieldOwner string) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.ForceApply(ctx, obj, fieldOwner)
}

// candidate is one replica running an Elector, and what its callbacks
// saw.
type candidate struct {
	name    string
	elector *leader.Elector
	client  *cuttable
	cancel  context.CancelFunc
	// result receives Run's error when it returns.
	result chan error
	// hold, when not nil, keeps onStarted from returning, after its
	// context ended, until it is closed: the leader's work still
	// stopping.
	hold chan struct{}

	mu     sync.Mutex
	events []string
	runErr error
	ended  bool
}

func (c *candidate) event(e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

// Events is what happened to the candidate so far, in order: "started"
// (onStarted called), "lead context ended", "stopped" (onStopped called),
// "returned" (Run returned).
func (c *candidate) Events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

// Returned is whether Run has returned, and its error.
func (c *candidate) Returned() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended, c.runErr
}

var replicas atomic.Int32

// timings are an Elector's durations.
type timings struct{ lease, renew, retry time.Duration }

var short = timings{leaseDuration, renewDeadline, retryPeriod}

// start runs an Elector on key with its own client, until the test ends.
func start(t *testing.T, key kclient.Key, tm timings, hold chan struct{}) *candidate {
	t.Helper()
	name := fmt.Sprintf("replica-%d", replicas.Add(1))
	c := &candidate{name: name, client: &cuttable{Client: newClient(t)}, result: make(chan error, 1), hold: hold}
	e, err := leader.New(leader.Config{
		Client: c.client, Key: key, Identity: leader.NewIdentity(name),
		LeaseDuration: tm.lease, RenewDeadline: tm.renew, RetryPeriod: tm.retry,
		Log: testLogger(t, name),
	})
	if err != nil {
		t.Fatalf("creating %s's elector: %v", name, err)
	}
	c.elector = e
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		err := e.Run(ctx, func(ctx context.Context) {
			c.event("started")
			<-ctx.Done()
			c.event("lead context ended")
			if c.hold != nil {
				<-c.hold
			}
		}, func() { c.event("stopped") })
		c.mu.Lock()
		c.events = append(c.events, "returned")
		c.ended, c.runErr = true, err
		c.mu.Unlock()
		c.result <- err
	}()
	t.Cleanup(func() {
		cancel()
		if c.hold != nil {
			select {
			case <-c.hold:
			default:
				close(c.hold)
			}
		}
		testutil.Eventually(t, name+"'s Run returning at the end of the test", converge, func() error {
			if ended, _ := c.Returned(); !ended {
				return errors.New("still running")
			}
			return nil
		})
	})
	return c
}

// testLogger logs to the test's log, so a failure shows what each elector
// did.
func testLogger(t *testing.T, name string) logr.Logger {
	return testr.New(t).WithName(name)
}

// oneLeader waits until exactly one of cands leads, and returns it and
// the others.
func oneLeader(t *testing.T, cands ...*candidate) (*candidate, []*candidate) {
	t.Helper()
	var leading *candidate
	var others []*candidate
	testutil.Eventually(t, "exactly one elector leading", converge, func() error {
		leading, others = nil, nil
		var names []string
		for _, c := range cands {
			if c.elector.IsLeader() {
				leading = c
				names = append(names, c.name)
			} else {
				others = append(others, c)
			}
		}
		if len(names) != 1 {
			return fmt.Errorf("leading: %v", names)
		}
		return nil
	})
	return leading, others
}

// readLease reads the Lease key names.
func readLease(t *testing.T, c kclient.Client, key kclient.Key) *coordinationv1.Lease {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := c.Get(t.Context(), key, lease); err != nil {
		t.Fatalf("reading the Lease %s: %v", key, err)
	}
	return lease
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return "<nil>"
	}
	return *lease.Spec.HolderIdentity
}

func durationOf(lease *coordinationv1.Lease) int32 {
	if lease.Spec.LeaseDurationSeconds == nil {
		return -1
	}
	return *lease.Spec.LeaseDurationSeconds
}

func transitionsOf(lease *coordinationv1.Lease) int32 {
	if lease.Spec.LeaseTransitions == nil {
		return -1
	}
	return *lease.Spec.LeaseTransitions
}

// gauge is the leader_election_master_status line c's Collector exports,
// as a scrape of a registry it is registered with shows it.
func gauge(t *testing.T, c *candidate) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c.elector.Collector()); err != nil {
		t.Fatalf("registering %s's collector: %v", c.name, err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") {
			return line
		}
	}
	t.Fatalf("%s's collector exports no leader_election_master_status:\n%s", c.name, rec.Body.String())
	return ""
}

// wantEvents fails unless c's events are want, in order.
func wantEvents(t *testing.T, c *candidate, want ...string) {
	t.Helper()
	if got := c.Events(); strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("%s's events = %q, want %q", c.name, got, want)
	}
}

// TestElectorOneLeader: of two electors on one Lease only one leads, and
// keeps leading, renewing the Lease, for longer than LeaseDuration; the
// Lease names it with the configured duration; Fence passes for it and
// fails for the other; the gauge reads 1 on it and 0 on the other; the
// other, cancelled without ever leading, returns without calling either
// callback and changes nothing.
func TestElectorOneLeader(t *testing.T) {
	c := newClient(t)
	key := leaseKey()
	a, b := start(t, key, short, nil), start(t, key, short, nil)
	l, others := oneLeader(t, a, b)
	o := others[0]

	testutil.Consistently(t, l.name+" alone leading", 2*leaseDuration, func() error {
		if !l.elector.IsLeader() || o.elector.IsLeader() || len(o.Events()) != 0 {
			return fmt.Errorf("%s leading %v, %s leading %v with events %q", l.name, l.elector.IsLeader(), o.name, o.elector.IsLeader(), o.Events())
		}
		return nil
	})
	wantEvents(t, l, "started")

	lease := readLease(t, c, key)
	if h := holderOf(lease); h != l.elector.Identity() {
		t.Errorf("the Lease's holder = %s, want the leader %s", h, l.elector.Identity())
	}
	if d := durationOf(lease); d != 2 {
		t.Errorf("the Lease's duration = %d, want 2", d)
	}
	if lease.Spec.AcquireTime == nil || lease.Spec.RenewTime == nil {
		t.Errorf("the Lease has no acquire or renew time: %+v", lease.Spec)
	}
	if n := transitionsOf(lease); n != 0 {
		t.Errorf("the Lease's transitions = %d, want 0 (its creator leads)", n)
	}
	// The leader renews: the renew time moves on, the acquire time does
	// not.
	testutil.Eventually(t, "the leader renewing the Lease", converge, func() error {
		now := readLease(t, c, key)
		if !now.Spec.RenewTime.After(lease.Spec.RenewTime.Time) || !now.Spec.AcquireTime.Equal(lease.Spec.AcquireTime) {
			return fmt.Errorf("renew time %s (was %s), acquire time %s (was %s)", now.Spec.RenewTime, lease.Spec.RenewTime, now.Spec.AcquireTime, lease.Spec.AcquireTime)
		}
		return nil
	})

	if err := leader.Fence(c, key, l.elector.Identity(), time.Now)(t.Context()); err != nil {
		t.Errorf("Fence for the leader %s: %v", l.name, err)
	}
	if err := leader.Fence(c, key, o.elector.Identity(), time.Now)(t.Context()); err == nil {
		t.Errorf("Fence for %s, which does not lead, passed", o.name)
	}

	want := func(c *candidate, v int) {
		t.Helper()
		if got, w := gauge(t, c), fmt.Sprintf(`leader_election_master_status{name=%q} %d`, key.Name, v); got != w {
			t.Errorf("%s's gauge: %s, want %s", c.name, got, w)
		}
	}
	want(l, 1)
	want(o, 0)

	o.cancel()
	testutil.Eventually(t, o.name+"'s Run returning once cancelled", converge, func() error {
		if ended, err := o.Returned(); !ended || err != nil {
			return fmt.Errorf("returned %v with %v", ended, err)
		}
		return nil
	})
	wantEvents(t, o, "returned")
	if !l.elector.IsLeader() {
		t.Errorf("%s stopped leading when %s, which did not lead, was cancelled", l.name, o.name)
	}
	if h := holderOf(readLease(t, c, key)); h != l.elector.Identity() {
		t.Errorf("the Lease's holder = %s after the candidate %s was cancelled, want the leader %s", h, o.name, l.elector.Identity())
	}
}

// TestElectorReleasesOnCancel: a leader whose context is cancelled stops
// leading, waits for its work (onStarted) to return and only then
// releases the Lease: an empty holder, a duration of one second, the
// same transitions.
func TestElectorReleasesOnCancel(t *testing.T) {
	c := newClient(t)
	key := leaseKey()
	hold := make(chan struct{})
	l := start(t, key, short, hold)
	oneLeader(t, l)
	before := readLease(t, c, key)

	l.cancel()
	testutil.Eventually(t, "the leader's onStarted context ending", converge, func() error {
		if ev := l.Events(); len(ev) < 2 || ev[1] != "lead context ended" {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
	if l.elector.IsLeader() {
		t.Errorf("%s still leads after its onStarted context ended", l.name)
	}
	// While its work has not returned, the Lease keeps naming it, so no
	// other replica starts the same work.
	testutil.Consistently(t, "the Lease naming the stopping leader until its work returns", 4*retryPeriod, func() error {
		if h := holderOf(readLease(t, c, key)); h != l.elector.Identity() {
			return fmt.Errorf("holder %s, want %s", h, l.elector.Identity())
		}
		return nil
	})
	close(hold)
	testutil.Eventually(t, "the leader's Run returning", converge, func() error {
		if ended, err := l.Returned(); !ended || err != nil {
			return fmt.Errorf("returned %v with %v", ended, err)
		}
		return nil
	})
	wantEvents(t, l, "started", "lead context ended", "stopped", "returned")

	lease := readLease(t, c, key)
	if h := holderOf(lease); h != "" {
		t.Errorf("the released Lease's holder = %q, want empty", h)
	}
	if d := durationOf(lease); d != 1 {
		t.Errorf("the released Lease's duration = %d, want 1", d)
	}
	if got, want := transitionsOf(lease), transitionsOf(before); got != want {
		t.Errorf("the released Lease's transitions = %d, want %d as before", got, want)
	}
}

// TestElectorCancelHandsOver: when the leader is cancelled, the other
// elector takes over well before LeaseDuration (30s here: without the
// release it could not take over in under 30s) and counts a transition.
func TestElectorCancelHandsOver(t *testing.T) {
	c := newClient(t)
	key := leaseKey()
	long := timings{30 * time.Second, renewDeadline, retryPeriod}
	a, b := start(t, key, long, nil), start(t, key, long, nil)
	l, others := oneLeader(t, a, b)
	o := others[0]
	before := transitionsOf(readLease(t, c, key))

	l.cancel()
	cancelled := time.Now()
	testutil.Eventually(t, o.name+" taking over from the cancelled leader well before LeaseDuration", 10*time.Second, func() error {
		if !o.elector.IsLeader() {
			return fmt.Errorf("%s not leading; the Lease names %s", o.name, holderOf(readLease(t, c, key)))
		}
		return nil
	})
	t.Logf("%s took over %s after the leader was cancelled", o.name, time.Since(cancelled).Round(time.Millisecond))
	testutil.Eventually(t, "the cancelled leader's Run returning", converge, func() error {
		if ended, err := l.Returned(); !ended || err != nil {
			return fmt.Errorf("returned %v with %v", ended, err)
		}
		return nil
	})
	wantEvents(t, l, "started", "lead context ended", "stopped", "returned")
	lease := readLease(t, c, key)
	if h := holderOf(lease); h != o.elector.Identity() {
		t.Errorf("the Lease's holder = %s, want the new leader %s", h, o.elector.Identity())
	}
	if got := transitionsOf(lease); got != before+1 {
		t.Errorf("the Lease's transitions = %d, want %d", got, before+1)
	}
}

// TestElectorUnreleasedLeaseWaitsLeaseDuration: a leader cut off from the
// apiserver (it neither renews nor releases) stops leading once
// RenewDeadline passes, and the other elector takes over only after
// LeaseDuration without a change to the Lease, and not before the old
// leader stopped.
func TestElectorUnreleasedLeaseWaitsLeaseDuration(t *testing.T) {
	c := newClient(t)
	key := leaseKey()
	tm := timings{4 * time.Second, renewDeadline, retryPeriod}
	a, b := start(t, key, tm, nil), start(t, key, tm, nil)
	l, others := oneLeader(t, a, b)
	o := others[0]
	before := readLease(t, c, key)

	// Cut the leader off just after a renewal, so the other elector's
	// wait starts no earlier than the cut.
	testutil.Eventually(t, "a renewal of the Lease", converge, func() error {
		if now := readLease(t, c, key); !now.Spec.RenewTime.After(before.Spec.RenewTime.Time) {
			return errors.New("renew time unchanged")
		}
		return nil
	}, testutil.Every(10*time.Millisecond))
	l.client.cut.Store(true)
	cut := time.Now()

	// LeaseDuration (4s) less a RetryPeriod and the renewal's round trip:
	// the other elector must not lead before, however slow the machine.
	testutil.Consistently(t, o.name+" not taking the Lease before LeaseDuration", tm.lease-time.Second-time.Since(cut), func() error {
		if o.elector.IsLeader() {
			return fmt.Errorf("%s leads %s after the leader was cut off", o.name, time.Since(cut))
		}
		return nil
	})
	testutil.Eventually(t, o.name+" taking over once LeaseDuration passed", converge, func() error {
		if !o.elector.IsLeader() {
			return fmt.Errorf("%s not leading", o.name)
		}
		return nil
	})
	t.Logf("%s took over %s after the leader was cut off", o.name, time.Since(cut).Round(time.Millisecond))
	// The old leader gave up after RenewDeadline, before the other could
	// take over: the margin is LeaseDuration less RenewDeadline and a
	// RetryPeriod, over 2s.
	ended, err := l.Returned()
	if !ended || !errors.Is(err, leader.ErrLost) {
		t.Errorf("the cut-off leader's Run: returned %v with %v, want it returned with %v before %s took over", ended, err, leader.ErrLost, o.name)
	}
	wantEvents(t, l, "started", "lead context ended", "stopped", "returned")
	lease := readLease(t, c, key)
	if h := holderOf(lease); h != o.elector.Identity() {
		t.Errorf("the Lease's holder = %s, want the new leader %s", h, o.elector.Identity())
	}
	if got, want := transitionsOf(lease), transitionsOf(before)+1; got != want {
		t.Errorf("the Lease's transitions = %d, want %d", got, want)
	}
}

// TestElectorStopsWhenLeaseTaken: a Lease rewritten to another holder
// makes the leader stop leading once RenewDeadline passes: its onStarted
// context ends, onStopped is called, Run returns ErrLost, the gauge reads
// 0, Fence fails for it, and it leaves the other holder's Lease as is.
func TestElectorStopsWhenLeaseTaken(t *testing.T) {
	c := newClient(t)
	key := leaseKey()
	l := start(t, key, short, nil)
	oneLeader(t, l)

	intruder := "intruder_1"
	testutil.Eventually(t, "rewriting the Lease to another holder", converge, func() error {
		lease := readLease(t, c, key)
		seconds, now := int32(30), metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &intruder, &seconds
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		if err := c.Update(t.Context(), lease, "test"); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			t.Fatalf("rewriting the Lease: %v", err)
		}
		return nil
	})
	rewritten := time.Now()
	testutil.Eventually(t, "the leader stopping once its Lease was taken", converge, func() error {
		if ended, _ := l.Returned(); !ended {
			return fmt.Errorf("leading %v, events %q", l.elector.IsLeader(), l.Events())
		}
		return nil
	})
	t.Logf("%s stopped %s after the Lease was rewritten", l.name, time.Since(rewritten).Round(time.Millisecond))
	if _, err := l.Returned(); !errors.Is(err, leader.ErrLost) {
		t.Errorf("Run returned %v, want %v", err, leader.ErrLost)
	}
	wantEvents(t, l, "started", "lead context ended", "stopped", "returned")
	if l.elector.IsLeader() {
		t.Errorf("%s still says it leads", l.name)
	}
	if got, want := gauge(t, l), fmt.Sprintf(`leader_election_master_status{name=%q} 0`, key.Name); got != want {
		t.Errorf("the gauge: %s, want %s", got, want)
	}
	if h := holderOf(readLease(t, c, key)); h != intruder {
		t.Errorf("the Lease's holder = %s after the old leader stopped, want %s (it must not release another's hold)", h, intruder)
	}
	if err := leader.Fence(c, key, l.elector.Identity(), time.Now)(t.Context()); err == nil {
		t.Errorf("Fence for the old leader passed")
	}
}

// TestElectorConfig: New names the field that is wrong; a valid Config's
// gauge is labelled with the Lease's name; an Elector runs once.
func TestElectorConfig(t *testing.T) {
	client := &cuttable{}
	client.cut.Store(true)
	valid := leader.Config{
		Client: client, Key: kclient.Key{Namespace: "ns", Name: "lease"}, Identity: "me",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
	}
	for _, tt := range []struct {
		name   string
		change func(*leader.Config)
		want   string
	}{
		{"no client", func(c *leader.Config) { c.Client = nil }, "Client"},
		{"no namespace", func(c *leader.Config) { c.Key.Namespace = "" }, "Key"},
		{"no name", func(c *leader.Config) { c.Key.Name = "" }, "Key"},
		{"no identity", func(c *leader.Config) { c.Identity = "" }, "Identity"},
		{"zero lease duration", func(c *leader.Config) { c.LeaseDuration = 0 }, "LeaseDuration 0s: must be positive"},
		{"negative renew deadline", func(c *leader.Config) { c.RenewDeadline = -time.Second }, "RenewDeadline -1s: must be positive"},
		{"zero retry period", func(c *leader.Config) { c.RetryPeriod = 0 }, "RetryPeriod 0s: must be positive"},
		{"lease duration under a second", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 900*time.Millisecond, 500*time.Millisecond, 100*time.Millisecond
		}, "LeaseDuration 900ms: must be at least 1s"},
		{"lease duration not above renew deadline", func(c *leader.Config) { c.RenewDeadline = 2 * time.Second }, "LeaseDuration 2s must exceed RenewDeadline 2s"},
		{"renew deadline not above 1.2 retry periods", func(c *leader.Config) { c.RetryPeriod = 1250 * time.Millisecond }, "RenewDeadline 1.5s must exceed 1.2 times RetryPeriod 1.25s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.change(&cfg)
			_, err := leader.New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}

	e, err := leader.New(valid)
	if err != nil {
		t.Fatalf("New of a valid Config: %v", err)
	}
	if got, want := gauge(t, &candidate{name: "valid", elector: e}), `leader_election_master_status{name="lease"} 0`; got != want {
		t.Errorf("the gauge of an Elector that never ran: %s, want %s", got, want)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := e.Run(ctx, nil, nil); err != nil {
		t.Errorf("Run with an ended context: %v, want nil", err)
	}
	if err := e.Run(t.Context(), nil, nil); err == nil || !strings.Contains(err.Error(), "runs once") {
		t.Errorf("Run again: %v, want an error saying an Elector runs once", err)
	}
}

// TestLeaderLinksNoTypedScheme: pkg/leader, which the agent will elect
// its leader with once it no longer runs a controller-runtime manager,
// links none of controller-runtime, client-go's typed clients and their
// scheme of every API group, client-go's leader election (which needs
// them) or its event recorders (docs/architecture.md, "Executable size").
func TestLeaderLinksNoTypedScheme(t *testing.T) {
	const pkg = "github.com/flotilla-dev/flotilla/pkg/leader"
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), deps)
	}
	banned := []string{
		"sigs.k8s.io/controller-runtime",
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/tools/leaderelection",
		"k8s.io/client-go/tools/record",
		"k8s.io/client-go/tools/events",
	}
	for _, d := range deps {
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, b+"/") {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
}
