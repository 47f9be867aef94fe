package setup

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/memberprobe"
)

// member stands in for a member apiserver: an HTTPS server whose /readyz
// answers "ok" while the member is up and 500 (as kube-apiserver does when
// a readiness check fails) while it is down. It counts the checks it
// answers, so tests can tell how many the gate made.
type member struct {
	srv *httptest.Server

	mu       sync.Mutex
	down     bool
	failNext int // the next failNext checks fail even while up
	ok       int // checks answered "ok"
	failed   int // checks answered with an error
}

func newMember(t *testing.T) *member {
	t.Helper()
	m := &member{}
	m.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.Error(w, "not /readyz", http.StatusNotFound)
			return
		}
		m.mu.Lock()
		fail := m.down || m.failNext > 0
		if fail {
			m.failed++
			m.failNext = max(m.failNext-1, 0)
		} else {
			m.ok++
		}
		m.mu.Unlock()
		if fail {
			http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// config is a client config for the member that trusts its certificate.
func (m *member) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.srv.Certificate().Raw})
	return &rest.Config{Host: m.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func (m *member) setDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
}

// blip makes the next n checks fail and returns once they have been
// answered and one more check passed after them.
func (m *member) blip(t *testing.T, n int) {
	t.Helper()
	m.mu.Lock()
	m.failNext = n
	failedBefore := m.failed
	m.mu.Unlock()
	var okAfter int
	testutil.Eventually(t, fmt.Sprintf("%d failed checks", n), 10*time.Second, func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.failNext > 0 {
			return fmt.Errorf("%d of %d failures still to answer", m.failNext, n)
		}
		if m.failed-failedBefore != n {
			return fmt.Errorf("answered %d failures, want %d", m.failed-failedBefore, n)
		}
		okAfter = m.ok
		return nil
	}, testutil.Every(time.Millisecond))
	m.waitChecks(t, "a passing check after the failures", func(ok, _ int) bool { return ok > okAfter })
}

// waitChecks polls until cond holds of the checks answered so far.
func (m *member) waitChecks(t *testing.T, what string, cond func(ok, failed int) bool) {
	t.Helper()
	testutil.Eventually(t, what, 10*time.Second, func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !cond(m.ok, m.failed) {
			return fmt.Errorf("%d checks passed, %d failed", m.ok, m.failed)
		}
		return nil
	}, testutil.Every(time.Millisecond))
}

func (m *member) failedChecks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// stream stands in for the sync client's Run: it holds the stream until
// its context ends and records, for each time the gate closed it, how
// many checks the member had failed by then.
type stream struct {
	m *member

	mu            sync.Mutex
	opens, closes int
	failedAtClose []int
}

func (s *stream) run(ctx context.Context) error {
	s.mu.Lock()
	s.opens++
	s.mu.Unlock()
	<-ctx.Done()
	failed := s.m.failedChecks()
	s.mu.Lock()
	s.closes++
	s.failedAtClose = append(s.failedAtClose, failed)
	s.mu.Unlock()
	return nil
}

func (s *stream) counts() (opens, closes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens, s.closes
}

// failedChecksAtClose is how many checks the member had failed when the
// gate closed the stream for the i-th time (from 0).
func (s *stream) failedChecksAtClose(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failedAtClose[i]
}

// waitCounts polls until the stream has been opened and closed so often.
func (s *stream) waitCounts(t *testing.T, what string, opens, closes int) {
	t.Helper()
	testutil.Eventually(t, what, 10*time.Second, func() error {
		if o, c := s.counts(); o != opens || c != closes {
			return fmt.Errorf("opened %d and closed %d times, want %d and %d", o, c, opens, closes)
		}
		return nil
	}, testutil.Every(time.Millisecond))
}

// requireCounts fails unless the stream has been opened and closed so often.
func (s *stream) requireCounts(t *testing.T, what string, opens, closes int) {
	t.Helper()
	if o, c := s.counts(); o != opens || c != closes {
		t.Fatalf("%s: the stream was opened %d and closed %d times, want %d and %d", what, o, c, opens, closes)
	}
}

// startGate runs a gate with the real /readyz check against m and a short
// interval, and returns a function that stops it and returns what Start
// returned. The test's cleanup stops it too.
func startGate(t *testing.T, m *member, run streamRunner) (stop func() error) {
	t.Helper()
	check, err := memberprobe.Readyz(m.config())
	if err != nil {
		t.Fatalf("building the /readyz check: %v", err)
	}
	g := newMemberGate(run, check, testr.New(t))
	g.interval = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(10 * time.Second):
				result = errors.New("the gate did not return within 10s of its context ending")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestMemberGateClosesTheStreamWhileTheMemberIsDown(t *testing.T) {
	m := newMember(t)
	s := &stream{m: m}
	stop := startGate(t, m, s.run)

	s.waitCounts(t, "the stream opening while the member answers", 1, 0)

	m.setDown(true)
	s.waitCounts(t, "the stream closing once the member stops answering", 1, 1)
	if got := s.failedChecksAtClose(0); got != memberFailAfter {
		t.Errorf("the stream closed after %d failed checks, want %d", got, memberFailAfter)
	}

	// The gate keeps checking and keeps the stream closed meanwhile.
	m.waitChecks(t, "the gate checking the member while it is down", func(_, failed int) bool { return failed >= 3*memberFailAfter })
	s.requireCounts(t, "while the member is down", 1, 1)

	m.setDown(false)
	s.waitCounts(t, "the stream opening again once the member answers", 2, 1)

	if err := stop(); err != nil {
		t.Fatalf("Start returned %v once its context ended, want nil", err)
	}
	s.requireCounts(t, "after the gate stopped", 2, 2)
}

func TestMemberGateKeepsTheStreamThroughFewerFailuresInARow(t *testing.T) {
	m := newMember(t)
	s := &stream{m: m}
	startGate(t, m, s.run)
	s.waitCounts(t, "the stream opening", 1, 0)

	// Two failures, a pass, two more failures: never three in a row.
	m.blip(t, memberFailAfter-1)
	m.blip(t, memberFailAfter-1)
	s.requireCounts(t, "after failures that were not in a row", 1, 0)

	// Three in a row do close it.
	m.blip(t, memberFailAfter)
	s.waitCounts(t, "the stream closing after three failures in a row and opening again", 2, 1)
	if got, want := s.failedChecksAtClose(0), 3*memberFailAfter-2; got != want {
		t.Errorf("the stream closed after %d failed checks in all, want %d", got, want)
	}
}

func TestMemberGateWaitsForTheMemberBeforeOpening(t *testing.T) {
	m := newMember(t)
	m.setDown(true)
	s := &stream{m: m}
	startGate(t, m, s.run)

	m.waitChecks(t, "the gate checking the member", func(_, failed int) bool { return failed >= 2*memberFailAfter })
	s.requireCounts(t, "while the member has never answered", 0, 0)

	m.setDown(false)
	s.waitCounts(t, "the stream opening once the member answers", 1, 0)
}

func TestMemberGateReturnsWhatEndsTheStream(t *testing.T) {
	m := newMember(t)
	check, err := memberprobe.Readyz(m.config())
	if err != nil {
		t.Fatalf("building the /readyz check: %v", err)
	}
	boom := errors.New("the sync client gave up")
	g := newMemberGate(func(context.Context) error { return boom }, check, testr.New(t))
	g.interval = 5 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- g.Start(t.Context()) }()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Start returned %v, want %v", err, boom)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s of the stream ending")
	}
}

func TestReadyzCheck(t *testing.T) {
	m := newMember(t)
	check, err := memberprobe.Readyz(m.config())
	if err != nil {
		t.Fatalf("building the check: %v", err)
	}
	if err := check(t.Context()); err != nil {
		t.Errorf("check of a ready member: %v, want nil", err)
	}

	m.setDown(true)
	err = check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "member /readyz") {
		t.Errorf("check of a member that is not ready: %v, want a member /readyz error", err)
	}
	m.setDown(false)

	// A server that does not chain to the configured CA is not the member.
	untrusted := m.config()
	untrusted.CAData = nil
	check, err = memberprobe.Readyz(untrusted)
	if err != nil {
		t.Fatalf("building the check: %v", err)
	}
	if err := check(t.Context()); err == nil {
		t.Error("check of a member whose certificate is not trusted passed, want an error")
	}
}
