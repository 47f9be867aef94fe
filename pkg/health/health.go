// Package health evaluates the health-shift signals of the Works a member
// runs (spec.health): the workload's own signals (unavailable ratio, pods
// in back-off, restart rate) from the member's apiserver, and PromQL
// queries against the member's Prometheus. It keeps each signal's state
// (OK, Pending, Breaching, Unknown) with `for` measured on the local
// clock, so no clock is compared across clusters, and wakes the Work's
// reporter only when a state changes: the hub hears of a breach once, not
// of every sample.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Querier evaluates a PromQL query to one value.
type Querier interface {
	Query(ctx context.Context, query string) (float64, error)
}

// Works is where the Runner finds the Works to evaluate and whom to tell
// of a change (the agent's works.Store).
type Works interface {
	// HealthWorks returns copies of the held Works that carry spec.health
	// and are due (due is called under the Work's own lock, cheaply), and
	// the names of all held Works with spec.health.
	HealthWorks(due func(name string, uid types.UID) bool) ([]*v1alpha1.Work, []string)
	// Wake makes the Work's status be computed and reported again.
	Wake(name string)
}

// Runner evaluates the signals of the Works every interval.
type Runner struct {
	// Works are the Works to evaluate.
	Works Works
	// Reader reads the Deployments and lists the pods live (a client, not
	// a cache: pods are listed only for Works with workload signals).
	Reader kclient.Reader
	// Prometheus answers Prometheus signals; nil makes them Unknown.
	Prometheus Querier
	// Tick is how often the Runner looks for due evaluations (default
	// 200ms); each Work is evaluated at its own interval.
	Tick time.Duration

	now   func() time.Time
	mu    sync.Mutex
	works map[string]*workState
}

// workState is what the Runner keeps of one Work.
type workState struct {
	uid      types.UID
	next     time.Time
	signals  map[string]*signalState
	restarts restartTracker
}

// signalState is one signal's state.
type signalState struct {
	status     v1alpha1.SignalStatus
	aboveSince time.Time
}

// NeedLeaderElection: only the leading agent applies and reports.
func (r *Runner) NeedLeaderElection() bool { return true }

// Start evaluates until ctx ends.
func (r *Runner) Start(ctx context.Context) error {
	tick := r.Tick
	if tick <= 0 {
		tick = 200 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		r.RunDue(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (r *Runner) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// RunDue evaluates every Work whose evaluation is due, wakes those whose
// signal states changed and forgets Works no longer held.
func (r *Runner) RunDue(ctx context.Context) {
	now := r.clock()
	works, names := r.Works.HealthWorks(func(name string, uid types.UID) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		ws := r.works[name]
		return ws == nil || ws.uid != uid || !now.Before(ws.next)
	})
	for _, w := range works {
		if r.Evaluate(ctx, w, r.clock()) {
			r.Works.Wake(w.Name)
		}
	}
	held := make(map[string]bool, len(names))
	for _, n := range names {
		held[n] = true
	}
	r.mu.Lock()
	for name := range r.works {
		if !held[name] {
			delete(r.works, name)
		}
	}
	r.mu.Unlock()
}

// Status is the last evaluation of Work name's signals, in spec order
// (nil for a Work without spec.health or not evaluated yet).
func (r *Runner) Status(name string, spec *v1alpha1.WorkHealth) []v1alpha1.SignalStatus {
	if spec == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.works[name]
	if ws == nil {
		return nil
	}
	var out []v1alpha1.SignalStatus
	for _, s := range spec.Signals {
		if st, ok := ws.signals[s.Name]; ok {
			out = append(out, *st.status.DeepCopy())
		}
	}
	return out
}

// Evaluate evaluates w's signals at now and says whether a state changed.
func (r *Runner) Evaluate(ctx context.Context, w *v1alpha1.Work, now time.Time) bool {
	h := w.Spec.Health
	r.mu.Lock()
	if r.works == nil {
		r.works = map[string]*workState{}
	}
	ws := r.works[w.Name]
	if ws == nil || ws.uid != w.UID {
		ws = &workState{uid: w.UID, signals: map[string]*signalState{}}
		r.works[w.Name] = ws
	}
	r.mu.Unlock()

	var wl *workload
	var wlErr error
	needWorkload := slices.ContainsFunc(h.Signals, func(s v1alpha1.HealthSignal) bool { return s.Type != v1alpha1.SignalPrometheus })
	if needWorkload {
		wl, wlErr = r.readWorkload(ctx, w)
	}
	values := make(map[string]float64, len(h.Signals))
	errs := make(map[string]error, len(h.Signals))
	for _, s := range h.Signals {
		switch {
		case s.Type == v1alpha1.SignalPrometheus:
			if r.Prometheus == nil {
				errs[s.Name] = fmt.Errorf("no Prometheus is configured for this cluster (the agent's --prometheus-url)")
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, max(h.Interval.Duration, 2*time.Second))
			values[s.Name], errs[s.Name] = r.Prometheus.Query(qctx, s.Query)
			cancel()
		case wlErr != nil:
			errs[s.Name] = wlErr
		default:
			values[s.Name], errs[s.Name] = wl.value(s.Type, &ws.restarts, now, max(h.For.Duration, time.Minute))
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	next := now.Add(max(h.Interval.Duration, v1alpha1.MinHealthShiftInterval))
	live := map[string]bool{}
	for _, s := range h.Signals {
		live[s.Name] = true
		st := ws.signals[s.Name]
		if st == nil {
			st = &signalState{status: v1alpha1.SignalStatus{Name: s.Name}}
			ws.signals[s.Name] = st
		}
		state, value, msg := v1alpha1.SignalUnknown, "", ""
		if err := errs[s.Name]; err != nil {
			msg = truncate.String(err.Error(), 1024)
			st.aboveSince = time.Time{}
		} else {
			v := values[s.Name]
			value = strconv.FormatFloat(v, 'g', 6, 64)
			state = v1alpha1.SignalOK
			if v > s.Threshold.AsApproximateFloat64() {
				if st.aboveSince.IsZero() {
					st.aboveSince = now
				}
				state = v1alpha1.SignalPending
				if due := st.aboveSince.Add(h.For.Duration); !now.Before(due) {
					state = v1alpha1.SignalBreaching
				} else if due.Before(next) {
					// Look again the moment `for` is over.
					next = due
				}
			} else {
				st.aboveSince = time.Time{}
			}
		}
		if state != st.status.State || (state == v1alpha1.SignalUnknown && msg != st.status.Message) {
			t := metav1.NewTime(now)
			st.status = v1alpha1.SignalStatus{Name: s.Name, State: state, Value: value, Message: msg, Since: &t}
			changed = true
		}
	}
	for name := range maps.Clone(ws.signals) {
		if !live[name] {
			delete(ws.signals, name)
			changed = true
		}
	}
	ws.next = next
	if changed {
		log.FromContext(ctx).V(1).Info("health signals changed", "work", w.Name, "signals", summary(ws, h))
	}
	return changed
}

func summary(ws *workState, h *v1alpha1.WorkHealth) string {
	out := ""
	for _, s := range h.Signals {
		if st := ws.signals[s.Name]; st != nil {
			out += fmt.Sprintf("%s=%s(%s) ", s.Name, st.status.State, st.status.Value)
		}
	}
	return out
}

// workload is the app's Deployment and pods in the member.
type workload struct {
	desired, unavailable int32
	pods                 []corev1.Pod
}

// maxPods bounds the pods looked at per evaluation.
const maxPods = 500

// readWorkload reads w's Deployment (the first one of its manifests) and
// its pods.
func (r *Runner) readWorkload(ctx context.Context, w *v1alpha1.Work) (*workload, error) {
	var key kclient.Key
	for _, m := range w.Spec.Manifests {
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(m.Raw, &obj); err == nil && obj.Kind == "Deployment" {
			key = kclient.Key{Namespace: obj.Namespace, Name: obj.Name}
			break
		}
	}
	if key.Name == "" {
		return nil, fmt.Errorf("the Work has no Deployment")
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	if err := r.Reader.Get(ctx, key, u); err != nil {
		return nil, fmt.Errorf("reading Deployment %s: %w", key, err)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		return nil, fmt.Errorf("decoding Deployment %s: %w", key, err)
	}
	wl := &workload{unavailable: d.Status.UnavailableReplicas}
	if d.Spec.Replicas != nil {
		wl.desired = *d.Spec.Replicas
	}
	if d.Spec.Selector == nil {
		return wl, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("parsing Deployment %s's selector: %w", key, err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("v1")
	list.SetKind("PodList")
	if err := r.Reader.List(ctx, list, kclient.ListOptions{Namespace: key.Namespace, Labels: selector, Limit: maxPods}); err != nil {
		return nil, fmt.Errorf("listing the pods of Deployment %s: %w", key, err)
	}
	for i := range list.Items {
		var p corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &p); err != nil {
			return nil, fmt.Errorf("decoding pod %s: %w", list.Items[i].GetName(), err)
		}
		wl.pods = append(wl.pods, p)
	}
	return wl, nil
}

// backOffReasons are the waiting reasons of a container in back-off.
var backOffReasons = map[string]bool{"CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true}

// value is the workload signal of type t.
func (wl *workload) value(t v1alpha1.HealthSignalType, rt *restartTracker, now time.Time, window time.Duration) (float64, error) {
	switch t {
	case v1alpha1.SignalUnavailableRatio:
		if wl.desired <= 0 {
			return 0, nil
		}
		return float64(min(wl.unavailable, wl.desired)) / float64(wl.desired), nil
	case v1alpha1.SignalBackOffPods:
		n := 0
		for i := range wl.pods {
			if inBackOff(&wl.pods[i]) {
				n++
			}
		}
		return float64(n), nil
	case v1alpha1.SignalRestartRate:
		return rt.rate(wl.pods, now, window), nil
	}
	return 0, fmt.Errorf("unknown signal type %q", t)
}

func inBackOff(p *corev1.Pod) bool {
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if cs.State.Waiting != nil && backOffReasons[cs.State.Waiting.Reason] {
			return true
		}
	}
	return false
}

// restartTracker turns the pods' restart counts into restarts per minute
// over a window: it keeps each pod's last count and the increases seen.
type restartTracker struct {
	started bool
	last    map[types.UID]int32
	events  []restartEvent
}

type restartEvent struct {
	at time.Time
	n  int32
}

// rate records the pods' counts at now and returns the restarts per
// minute within window. A pod seen for the first time counts its restarts
// only after the first evaluation (a restarted agent does not count a
// pod's whole history as new).
func (rt *restartTracker) rate(pods []corev1.Pod, now time.Time, window time.Duration) float64 {
	cur := make(map[types.UID]int32, len(pods))
	var added int32
	for i := range pods {
		var n int32
		for _, cs := range pods[i].Status.ContainerStatuses {
			n += cs.RestartCount
		}
		uid := pods[i].UID
		cur[uid] = n
		if prev, ok := rt.last[uid]; ok {
			added += max(0, n-prev)
		} else if rt.started {
			added += n
		}
	}
	rt.last, rt.started = cur, true
	if added > 0 {
		rt.events = append(rt.events, restartEvent{at: now, n: added})
	}
	cut := now.Add(-window)
	i := 0
	for i < len(rt.events) && rt.events[i].at.Before(cut) {
		i++
	}
	rt.events = rt.events[i:]
	var sum int32
	for _, e := range rt.events {
		sum += e.n
	}
	return float64(sum) / window.Minutes()
}
