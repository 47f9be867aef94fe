package health

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// values is a Querier whose answer the test sets.
type values struct {
	v   float64
	err error
}

func (q *values) Query(context.Context, string) (float64, error) { return q.v, q.err }

func latencyWork(forD time.Duration) *v1alpha1.Work {
	w := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop-web", UID: "u1"}}
	w.Spec.Health = &v1alpha1.WorkHealth{
		Interval: metav1.Duration{Duration: time.Second},
		For:      metav1.Duration{Duration: forD},
		Signals:  []v1alpha1.HealthSignal{{Name: "latency", Type: v1alpha1.SignalPrometheus, Query: "q", Threshold: resource.MustParse("0.08")}},
	}
	return w
}

// TestEvaluateKeepsForOnTheLocalClock: above the threshold the signal is
// Pending until `for` has passed at every evaluation, then Breaching;
// back below it is OK at once; a query error is Unknown with the error.
// Only a change of state says "changed" (and so wakes the reporter), and
// while Pending the next evaluation is due exactly when `for` ends.
func TestEvaluateKeepsForOnTheLocalClock(t *testing.T) {
	ctx := context.Background()
	q := &values{}
	r := &Runner{Prometheus: q}
	w := latencyWork(5 * time.Second)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	state := func() v1alpha1.SignalStatus {
		st := r.Status(w.Name, w.Spec.Health)
		if len(st) != 1 {
			t.Fatalf("status has %d signals, want 1", len(st))
		}
		return st[0]
	}
	steps := []struct {
		at      time.Duration
		v       float64
		err     error
		want    v1alpha1.SignalState
		changed bool
		next    time.Duration // when the next evaluation is due
	}{
		{at: 0, v: 0.02, want: v1alpha1.SignalOK, changed: true, next: time.Second},
		{at: time.Second, v: 0.03, want: v1alpha1.SignalOK, changed: false, next: 2 * time.Second},
		{at: 2 * time.Second, v: 0.12, want: v1alpha1.SignalPending, changed: true, next: 3 * time.Second},
		{at: 3 * time.Second, v: 0.12, want: v1alpha1.SignalPending, changed: false, next: 4 * time.Second},
		{at: 6500 * time.Millisecond, v: 0.13, want: v1alpha1.SignalPending, changed: false, next: 7 * time.Second},
		{at: 7 * time.Second, v: 0.12, want: v1alpha1.SignalBreaching, changed: true, next: 8 * time.Second},
		{at: 8 * time.Second, v: 0.2, want: v1alpha1.SignalBreaching, changed: false, next: 9 * time.Second},
		{at: 9 * time.Second, v: 0.05, want: v1alpha1.SignalOK, changed: true, next: 10 * time.Second},
		// A dip resets `for`: Pending again from 10s, not Breaching.
		{at: 10 * time.Second, v: 0.12, want: v1alpha1.SignalPending, changed: true, next: 11 * time.Second},
		{at: 11 * time.Second, err: errors.New("bad_data: parse error"), want: v1alpha1.SignalUnknown, changed: true, next: 12 * time.Second},
		{at: 12 * time.Second, err: errors.New("bad_data: parse error"), want: v1alpha1.SignalUnknown, changed: false, next: 13 * time.Second},
		{at: 13 * time.Second, err: errors.New("no sample"), want: v1alpha1.SignalUnknown, changed: true, next: 14 * time.Second},
		{at: 14 * time.Second, v: 0.12, want: v1alpha1.SignalPending, changed: true, next: 15 * time.Second},
	}
	for _, s := range steps {
		q.v, q.err = s.v, s.err
		changed := r.Evaluate(ctx, w, at(s.at))
		got := state()
		if got.State != s.want || changed != s.changed {
			t.Fatalf("at %v (value %v, err %v): state %s changed %v, want %s changed %v", s.at, s.v, s.err, got.State, changed, s.want, s.changed)
		}
		if s.err != nil && got.Message != s.err.Error() {
			t.Errorf("at %v: message %q, want the query error %q", s.at, got.Message, s.err)
		}
		if next := r.works[w.Name].next; !next.Equal(at(s.next)) {
			t.Errorf("at %v: next evaluation at %v, want %v", s.at, next.Sub(t0), s.next)
		}
	}
	// The 7s step: Pending at 6.5s asked to be looked at when `for` ends
	// (2s + 5s), not a whole interval later.
}

// TestEvaluateWithoutPrometheus: a Prometheus signal on a member without
// --prometheus-url is Unknown, saying so; nothing is guessed.
func TestEvaluateWithoutPrometheus(t *testing.T) {
	r := &Runner{}
	w := latencyWork(time.Second)
	r.Evaluate(context.Background(), w, time.Now())
	st := r.Status(w.Name, w.Spec.Health)
	if len(st) != 1 || st[0].State != v1alpha1.SignalUnknown || st[0].Message == "" {
		t.Fatalf("status %+v, want one Unknown signal with a message", st)
	}
}

// TestEvaluateForgetsARecreatedWork: a Work with a new UID starts afresh
// (no `for` carried over from the Work of the same name before it).
func TestEvaluateForgetsARecreatedWork(t *testing.T) {
	q := &values{v: 0.12}
	r := &Runner{Prometheus: q}
	w := latencyWork(2 * time.Second)
	t0 := time.Now()
	r.Evaluate(context.Background(), w, t0)
	w2 := w.DeepCopy()
	w2.UID = types.UID("u2")
	r.Evaluate(context.Background(), w2, t0.Add(3*time.Second))
	if st := r.Status(w.Name, w.Spec.Health); st[0].State != v1alpha1.SignalPending {
		t.Fatalf("the recreated Work's signal is %s, want Pending (its `for` starts again)", st[0].State)
	}
}

func pod(uid string, restarts int32, waiting string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
	cs := corev1.ContainerStatus{Name: "app", RestartCount: restarts}
	if waiting != "" {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waiting}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

// TestWorkloadSignals: the unavailable ratio, the pods in back-off, and
// restarts per minute over the window, where a pod first seen at the
// first evaluation brings no restarts (its history is not news) and a
// pod replaced by a new one does not count negative.
func TestWorkloadSignals(t *testing.T) {
	wl := &workload{desired: 4, unavailable: 3, pods: []corev1.Pod{pod("a", 0, "CrashLoopBackOff"), pod("b", 0, "ImagePullBackOff"), pod("c", 0, "ContainerCreating"), pod("d", 0, "")}}
	var rt restartTracker
	now := time.Now()
	if v, _ := wl.value(v1alpha1.SignalUnavailableRatio, &rt, now, time.Minute); v != 0.75 {
		t.Errorf("unavailable ratio %v, want 0.75", v)
	}
	if v, _ := wl.value(v1alpha1.SignalBackOffPods, &rt, now, time.Minute); v != 2 {
		t.Errorf("pods in back-off %v, want 2", v)
	}
	if v, _ := (&workload{}).value(v1alpha1.SignalUnavailableRatio, &rt, now, time.Minute); v != 0 {
		t.Errorf("unavailable ratio at 0 replicas %v, want 0", v)
	}

	steps := []struct {
		at   time.Duration
		pods []corev1.Pod
		want float64
	}{
		{0, []corev1.Pod{pod("a", 7, ""), pod("b", 0, "")}, 0},                // history is not news
		{10 * time.Second, []corev1.Pod{pod("a", 9, ""), pod("b", 1, "")}, 3}, // 3 restarts in the 1m window
		{20 * time.Second, []corev1.Pod{pod("b", 1, ""), pod("c", 2, "")}, 5}, // a gone; c new with 2
		{85 * time.Second, []corev1.Pod{pod("b", 1, ""), pod("c", 2, "")}, 0}, // the window moved past them
		{90 * time.Second, []corev1.Pod{pod("b", 0, ""), pod("c", 4, "")}, 2}, // b's count went down: no negative
	}
	for _, s := range steps {
		if v := rt.rate(s.pods, now.Add(s.at), time.Minute); v != s.want {
			t.Errorf("at %v: restart rate %v/min, want %v", s.at, v, s.want)
		}
	}
}

// heldWorks is a Works holding a fixed list and recording wake-ups.
type heldWorks struct {
	works []*v1alpha1.Work
	woken []string
}

func (h *heldWorks) HealthWorks(due func(string, types.UID) bool) ([]*v1alpha1.Work, []string) {
	var out []*v1alpha1.Work
	var names []string
	for _, w := range h.works {
		names = append(names, w.Name)
		if due(w.Name, w.UID) {
			out = append(out, w.DeepCopy())
		}
	}
	return out, names
}
func (h *heldWorks) Wake(name string) { h.woken = append(h.woken, name) }

// TestRunDue: a Work is evaluated when due only, its reporter is woken
// only when a state changed, and a Work no longer held is forgotten.
func TestRunDue(t *testing.T) {
	q := &values{v: 0.02}
	held := &heldWorks{works: []*v1alpha1.Work{latencyWork(time.Second)}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := &Runner{Works: held, Prometheus: q, now: func() time.Time { return now }}
	ctx := context.Background()

	r.RunDue(ctx) // first evaluation: OK is news
	now = now.Add(500 * time.Millisecond)
	q.v = 0.5
	r.RunDue(ctx) // not due yet (interval 1s): the raise is not seen
	if st := r.Status("shop-web", held.works[0].Spec.Health); st[0].State != v1alpha1.SignalOK {
		t.Fatalf("evaluated before the interval: state %s", st[0].State)
	}
	now = now.Add(500 * time.Millisecond)
	r.RunDue(ctx) // due: Pending
	now = now.Add(time.Second)
	r.RunDue(ctx) // Breaching
	now = now.Add(time.Second)
	r.RunDue(ctx) // still Breaching: no wake-up
	if want := []string{"shop-web", "shop-web", "shop-web"}; len(held.woken) != len(want) {
		t.Fatalf("woken %v, want %v (OK, Pending, Breaching)", held.woken, want)
	}
	held.works = nil
	r.RunDue(ctx)
	if len(r.works) != 0 {
		t.Fatalf("a Work no longer held is still tracked: %v", r.works)
	}
}
