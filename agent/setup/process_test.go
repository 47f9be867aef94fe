package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/kclient/informer"
	"github.com/flotilla-dev/flotilla/pkg/leader"
)

// journal records what the processes' runnables did, in order.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) has(line string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, l := range j.lines {
		if l == line {
			return true
		}
	}
	return false
}

func (j *journal) index(line string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, l := range j.lines {
		if l == line {
			return i
		}
	}
	return -1
}

// leading is a leader-only runnable that notes its start and, after a
// pause that stands for work still finishing, its stop.
type leading struct {
	name string
	j    *journal
}

func (l leading) NeedLeaderElection() bool { return true }

func (l leading) Start(ctx context.Context) error {
	l.j.add("%s started", l.name)
	<-ctx.Done()
	time.Sleep(300 * time.Millisecond)
	l.j.add("%s stopped", l.name)
	return nil
}

// processFixture builds processes on one Lease of the envtest apiserver.
type processFixture struct {
	t   *testing.T
	kc  kclient.Client
	key kclient.Key
}

func newProcessFixture(t *testing.T) *processFixture {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := direct.New(startEnv(t), scheme)
	if err != nil {
		t.Fatal(err)
	}
	ns := "process-" + rand.String(6)
	if err := kc.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, ""); err != nil {
		t.Fatal(err)
	}
	return &processFixture{t: t, kc: kc, key: kclient.Key{Namespace: ns, Name: "agent-lease"}}
}

// start runs a process named name with rs on the Lease until stop is
// called (or the test ends). done is closed when Start returned, and then
// result is its error; stop returns it too.
func (f *processFixture) start(name string, rs ...runnable) (stop func() error, done <-chan struct{}, result func() error) {
	f.t.Helper()
	el, err := leader.New(leader.Config{
		Client: f.kc, Key: f.key, Identity: leader.NewIdentity(name),
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		Log: testr.New(f.t).WithName(name),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	p := newProcess(testr.New(f.t).WithName(name))
	p.elector = el
	for _, r := range rs {
		p.Add(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	var startErr error
	go func() {
		startErr = p.Start(ctx)
		close(ended)
	}()
	stop = func() error {
		cancel()
		select {
		case <-ended:
			return startErr
		case <-time.After(time.Minute):
			return errors.New("the process did not stop within a minute")
		}
	}
	f.t.Cleanup(func() {
		if err := stop(); err != nil && !strings.Contains(err.Error(), "leader election lost") && err.Error() != "the part broke" {
			f.t.Errorf("process %s: %v", name, err)
		}
	})
	return stop, ended, func() error { return startErr }
}

// TestProcessStopsTheLeaderBeforeReleasing: a leader that stops runs its
// leader-only parts to their end before it releases the Lease, so the
// next replica starts its own only after; the Lease is released (it no
// longer names the stopped replica) when Start returns.
func TestProcessStopsTheLeaderBeforeReleasing(t *testing.T) {
	f := newProcessFixture(t)
	j := &journal{}
	stopA, _, _ := f.start("a", leading{"a", j})
	testutil.Eventually(t, "replica a to lead", 30*time.Second, func() error {
		if !j.has("a started") {
			return errors.New("a has not started leading")
		}
		return nil
	})
	f.start("b", leading{"b", j})
	testutil.Consistently(t, "replica b to stay a standby while a leads", time.Second, func() error {
		if j.has("b started") {
			return errors.New("b started leading while a holds the Lease")
		}
		return nil
	})
	if err := stopA(); err != nil {
		t.Fatalf("stopping replica a: %v", err)
	}
	// a released the Lease as it stopped: read at once, it names no one
	// (or b, which took it on its next try), not a, whose hold would
	// otherwise last the 3 s Lease duration.
	lease := &coordinationv1.Lease{}
	if err := f.kc.Get(t.Context(), f.key, lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && strings.HasPrefix(*h, "a_") {
		t.Errorf("the Lease still names %s after replica a stopped; want it released", *h)
	}
	testutil.Eventually(t, "replica b to lead after a stopped", 30*time.Second, func() error {
		if !j.has("b started") {
			return errors.New("b has not started leading")
		}
		return nil
	})
	if as, bs := j.index("a stopped"), j.index("b started"); as < 0 || as > bs {
		t.Errorf("journal %v: a's leader part must stop before b's starts", j.lines)
	}
}

// TestProcessReturnsALostLease: a Lease another replica took makes the
// process stop its leader parts and return an error saying "leader
// election lost" (what internal/reexec starts over on).
func TestProcessReturnsALostLease(t *testing.T) {
	f := newProcessFixture(t)
	j := &journal{}
	_, done, result := f.start("a", leading{"a", j})
	testutil.Eventually(t, "replica a to lead", 30*time.Second, func() error {
		if !j.has("a started") {
			return errors.New("a has not started leading")
		}
		return nil
	})
	lease := &coordinationv1.Lease{}
	if err := f.kc.Get(t.Context(), f.key, lease); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds = ptr.To("someone-else"), &now, ptr.To[int32](3600)
	if err := f.kc.Update(t.Context(), lease, ""); err != nil {
		t.Fatalf("handing the Lease to another holder: %v", err)
	}
	select {
	case <-done:
		if err := result(); err == nil || !strings.Contains(err.Error(), "leader election lost") {
			t.Errorf("Start = %v; want an error saying leader election lost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not stop within 30 s of losing its Lease")
	}
	if !j.has("a stopped") {
		t.Errorf("journal %v: the leader part did not stop", j.lines)
	}
}

// failing is a runnable that fails after a moment.
type failing struct{}

func (failing) Start(context.Context) error {
	time.Sleep(200 * time.Millisecond)
	return errors.New("the part broke")
}

// TestProcessFailsWithItsPart: a part that fails stops the whole process
// with its error, leader parts included.
func TestProcessFailsWithItsPart(t *testing.T) {
	f := newProcessFixture(t)
	j := &journal{}
	_, done, result := f.start("a", leading{"a", j}, failing{})
	select {
	case <-done:
		if err := result(); err == nil || err.Error() != "the part broke" {
			t.Errorf("Start = %v; want the failing part's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not stop within 30 s of a part failing")
	}
	if j.has("a started") && !j.has("a stopped") {
		t.Errorf("journal %v: the leader part was left running", j.lines)
	}
}

// TestProcessServesProbes: /healthz and /readyz with named checks, each
// at its own path, as controller-runtime's manager serves them; a taken
// port fails Start at once.
func TestProcessServesProbes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := newProcess(testr.New(t))
	p.probeAddr = addr
	p.AddHealthzCheck("ping", func(*http.Request) error { return nil })
	p.AddReadyzCheck("good", func(*http.Request) error { return nil })
	p.AddReadyzCheck("bad", func(*http.Request) error { return errors.New("the hub is away") })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	testutil.Eventually(t, "the probe server to answer", 15*time.Second, func() error {
		_, _, err := get("/healthz")
		return err
	})
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 500, ""},
		{"/readyz/good", 200, "ok"},
		{"/readyz/bad", 500, "the hub is away"},
		{"/readyz?verbose", 500, "[-]bad failed"},
	} {
		code, body, err := get(c.path)
		if err != nil || code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("GET %s = %d %q, %v; want %d containing %q", c.path, code, body, err, c.code, c.body)
		}
	}

	taken := newProcess(testr.New(t))
	taken.probeAddr = addr
	if err := taken.Start(t.Context()); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("Start on a taken probe address = %v; want an error naming %s", err, addr)
	}
}

// TestProcessFailsOnACacheThatCannotSync: a cache that cannot list a kind
// fails the start, naming the kind, and no leader part starts.
func TestProcessFailsOnACacheThatCannotSync(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := informer.New(startEnv(t), scheme, []informer.Kind{
		{Object: &corev1.ConfigMap{}},
		{Object: &appsv1.Deployment{}, Resource: "nosuchresources"},
	})
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{}
	p := newProcess(testr.New(t))
	p.cache, p.syncTimeout = c, 2*time.Second
	p.Add(leading{"a", j})
	done := make(chan error, 1)
	go func() { done <- p.Start(t.Context()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "Deployment") || strings.Contains(err.Error(), "ConfigMap") {
			t.Errorf("Start = %v; want an error naming the Deployment cache only", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Start did not fail within a minute of a cache that cannot sync")
	}
	if j.has("a started") {
		t.Error("a leader part started before the cache synced")
	}
}
