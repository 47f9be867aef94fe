//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// failImage never becomes Ready on the testbed: its kwok stages leave
// pods whose image contains flotilla-fail not Ready.
const failImage = "registry.example.com/team/web:flotilla-fail"

// How the rollout specs watch the members and how long they wait.
const (
	// samplePeriod is how often the ordering spec reads the members'
	// Deployments.
	samplePeriod = 100 * time.Millisecond
	// rolloutTimeout bounds a whole Progressive rollout over three
	// members (each waits for its Deployment, then minSuccessTime).
	rolloutTimeout = 5 * time.Minute
	// timingSlack is how much earlier than minSuccessTime after the
	// previous member became done the next member may be proven to have
	// switched. The hub rounds a cluster's availableTime up to the second
	// (what metav1.Time keeps), so it never counts minSuccessTime from
	// before the cluster was available; the slack covers the members'
	// own clocks and the apiserver's answer being a moment old. Polling's
	// lateness is not in it: every moment is bounded by when a read was
	// asked and when it was answered (rolloutTrace), which on a loaded
	// machine can be seconds apart.
	timingSlack = 500 * time.Millisecond
)

// progressiveApp is a MyApp of baseImage with replicas (per member when
// placement is Duplicated) rolled out Progressively with p. Its pods have
// the readiness probe a real app would: on kind the test app's
// flotilla-fail image answers /readyz with 503, so its pods never become
// Ready (the testbed's kwok stages ignore probes and decide by the image
// name, with the same outcome). Probed every second, a pod turns unready
// after three failures in a row (Kubernetes' default), not one, each
// given 2s: on a loaded 2-core machine running four kind clusters and the
// independent specs side by side, probes of ready pods were seen to time
// out twice in a row at the 1s default, and a ready pod flapping to
// unready reads as a member leaving the rolled-out state, which the order
// and no-change checks refuse.
func progressiveApp(in SpecInput, replicas int32, placement flotillav1.Placement, p flotillav1.ProgressiveRollout) *flotillav1.MyApp {
	app := newMyApp(in, "web", replicas, placement)
	app.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{Containers: []corev1.Container{{
		Name: "web",
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 3,
		},
	}}}}
	app.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &p}
	return app
}

// rolloutIs checks status.rollout of MyApp name: phase, every cluster in
// clusters with its phase (clusters nil: any), and check, if given, on
// the whole status.
func rolloutIs(in SpecInput, name string, phase flotillav1.RolloutPhase, clusters map[string]flotillav1.ClusterRolloutPhase, check func(*flotillav1.MyApp) error) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		ro := app.Status.Rollout
		if ro == nil {
			return errors.New("no status.rollout")
		}
		desc := rolloutString(ro)
		if ro.Phase != phase {
			return fmt.Errorf("status.rollout %s; want phase %s", desc, phase)
		}
		if clusters != nil {
			got := map[string]flotillav1.ClusterRolloutPhase{}
			for _, c := range ro.Clusters {
				got[c.Name] = c.Phase
			}
			if fmt.Sprint(got) != fmt.Sprint(clusters) {
				return fmt.Errorf("status.rollout %s; want clusters %v", desc, clusters)
			}
		}
		if check != nil {
			if err := check(app); err != nil {
				return fmt.Errorf("status.rollout %s: %w", desc, err)
			}
		}
		return nil
	}
}

func rolloutString(ro *flotillav1.RolloutStatus) string {
	var cs []string
	for _, c := range ro.Clusters {
		s := fmt.Sprintf("%s %s@%s", c.Name, c.Phase, c.Revision)
		if c.Message != "" {
			s += fmt.Sprintf(" (%s)", c.Message)
		}
		cs = append(cs, s)
	}
	return fmt.Sprintf("phase %s progress %s current %s target %s (%s) clusters [%s]",
		ro.Phase, ro.Progress, ro.CurrentRevision, ro.TargetRevision, ro.Message, strings.Join(cs, "; "))
}

// settled checks that a rollout has nothing in flight: current and target
// revisions equal, every cluster Succeeded on it, progress n/n.
func settled(n int) func(*flotillav1.MyApp) error {
	return func(app *flotillav1.MyApp) error {
		ro := app.Status.Rollout
		if ro.CurrentRevision == "" || ro.CurrentRevision != ro.TargetRevision {
			return fmt.Errorf("currentRevision %q, targetRevision %q", ro.CurrentRevision, ro.TargetRevision)
		}
		if want := fmt.Sprintf("%d/%d", n, n); ro.Progress != want {
			return fmt.Errorf("progress %q, want %q", ro.Progress, want)
		}
		for _, c := range ro.Clusters {
			if c.Revision != ro.TargetRevision {
				return fmt.Errorf("cluster %s on revision %s", c.Name, c.Revision)
			}
		}
		if app.Status.ObservedGeneration != app.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", app.Status.ObservedGeneration, app.Generation)
		}
		return nil
	}
}

func allSucceeded(members []string) map[string]flotillav1.ClusterRolloutPhase {
	out := map[string]flotillav1.ClusterRolloutPhase{}
	for _, m := range members {
		out[m] = flotillav1.ClusterRolloutSucceeded
	}
	return out
}

// imageOf returns the image of d's only container.
func imageOf(d *appsv1.Deployment) string {
	if cs := d.Spec.Template.Spec.Containers; len(cs) == 1 {
		return cs[0].Image
	}
	return fmt.Sprintf("<%d containers>", len(d.Spec.Template.Spec.Containers))
}

// startRollout waits until the MyApp's first version runs everywhere (not
// a rollout: it applies at once) and its rollout is Complete, and returns
// the members' Deployment identities.
func startRollout(t *testing.T, in SpecInput, w map[string]int32) map[string]objectID {
	t.Helper()
	eventually(t, "Deployment web with ready replicas of "+baseImage+" in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	eventually(t, "the first version of MyApp web: status.rollout Complete on one revision", convergeTimeout,
		rolloutIs(in, "web", flotillav1.RolloutPhaseComplete, allSucceeded(in.Members), settled(len(in.Members))))
	ids, err := deploymentIDs(context.Background(), in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// deploymentSample is one reading of a member's Deployment: what it said
// at some moment between asked and at (when the answer came).
type deploymentSample struct {
	asked, at time.Time
	image     string
	// done: the new image fully rolled out (observed, every replica
	// updated, ready and available).
	done bool
}

// ProgressiveOrderSpec: a Duplicated MyApp on three members rolled out
// Progressively, maxConcurrency 1, with the last member as the canary
// group and minSuccessTime 3s. After an image change, reading the three
// member Deployments every 100ms, never more than one is rolling (new
// template and not yet fully updated and available, or less than
// minSuccessTime since it was), and the members update canary first, then
// the others by name: each switches its template only after the previous
// one was fully updated and available, and at least minSuccessTime later
// (less timingSlack). Each moment is known only between a read's ask and
// its answer, so a violation counts only when those bounds prove it
// (rolloutTrace). The rollout ends Complete with
// current == target revision, progress 3/3, and every member running the
// new image in the same Deployment.
func ProgressiveOrderSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	const minSuccess = 3 * time.Second
	canary := in.Members[len(in.Members)-1]
	order := append([]string{canary}, in.Members[:len(in.Members)-1]...) // the rest by name
	createMyApp(t, in, progressiveApp(in, 2, duplicated(), flotillav1.ProgressiveRollout{
		MaxConcurrency:   ptr.To(intstr.FromInt32(1)),
		Order:            []flotillav1.RolloutGroup{{Name: "canary", Clusters: flotillav1.ClusterAffinity{ClusterNames: []string{canary}}}},
		MinSuccessTime:   &metav1.Duration{Duration: minSuccess},
		ProgressDeadline: &metav1.Duration{Duration: 3 * time.Minute},
	}))
	w := each(in.Members, 2)
	before := startRollout(t, in, w)

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Image = rolledImage })
	rolled := map[string]deployWant{}
	for m, n := range w {
		rolled[m] = deployWant{replicas: n, image: rolledImage}
	}

	traces := map[string]*rolloutTrace{}
	for _, m := range in.Members {
		traces[m] = &rolloutTrace{}
	}
	var history []string // a line per change seen, for failure messages
	last := map[string]string{}
	deadline := time.Now().Add(rolloutTimeout)
	for {
		allDone := true
		for _, m := range in.Members {
			d := &appsv1.Deployment{}
			asked := time.Now()
			err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "web"}, d)
			at := time.Now()
			if err != nil {
				t.Fatalf("reading %s's Deployment web during the rollout: %v", m, err)
			}
			s := deploymentSample{asked: asked, at: at, image: imageOf(d), done: rolledOut(d, rolled[m]) == ""}
			tr := traces[m]
			switch {
			case s.image == baseImage:
				if !tr.firstNew.IsZero() {
					t.Fatalf("%s's Deployment went back to %s after switching to %s; seen: %s", m, baseImage, rolledImage, strings.Join(history, "; "))
				}
				tr.lastOld = s.asked
			case s.image == rolledImage:
				if tr.firstNew.IsZero() {
					tr.firstNew = at
				}
			default:
				t.Fatalf("%s's Deployment runs image %q, neither %s nor %s", m, s.image, baseImage, rolledImage)
			}
			if s.done {
				if tr.firstDone.IsZero() {
					tr.firstDone = at
				}
			} else {
				if !tr.firstDone.IsZero() {
					t.Fatalf("%s's Deployment stopped being fully rolled out after it was (%s); seen: %s", m, rolledOut(d, rolled[m]), strings.Join(history, "; "))
				}
				tr.lastNotDone = s.asked
				allDone = false
			}
			state := fmt.Sprintf("%s %d/%d/%d/%d", s.image, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas)
			if s.done {
				state += " done"
			}
			if last[m] != state {
				last[m] = state
				history = append(history, fmt.Sprintf("%s %s: %s", at.Format("15:04:05.000"), m, state))
			}
		}
		if m1, m2, ok := rollingTogether(in.Members, traces, minSuccess-timingSlack); ok {
			t.Fatalf("%s and %s were rolling at once with maxConcurrency 1 (each on the new template and not yet done, or done less than minSuccessTime ago); seen: %s", m1, m2, strings.Join(history, "; "))
		}
		if allDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout of %s to every member: did not converge within %s; seen: %s", rolledImage, rolloutTimeout, strings.Join(history, "; "))
		}
		time.Sleep(samplePeriod)
	}
	t.Logf("member Deployments during the rollout: %s", strings.Join(history, "; "))

	// The order: each member starts after the previous one was done, and
	// minSuccessTime after it (less the slack), by the bounds that favour
	// the hub (rolloutTrace).
	var starts []string
	for i, m := range order {
		tr := traces[m]
		starts = append(starts, fmt.Sprintf("%s switched in (%s, %s], done in (%s, %s]", m,
			tr.lastOld.Format("15:04:05.000"), tr.firstNew.Format("15:04:05.000"), tr.lastNotDone.Format("15:04:05.000"), tr.firstDone.Format("15:04:05.000")))
		if i == 0 {
			continue
		}
		if v := switchViolation(order[i-1], traces[order[i-1]], tr, minSuccess-timingSlack); v != "" {
			t.Fatalf("%s switched to %s %s (want the order %v, minSuccessTime %s): %s", m, rolledImage, v, order, minSuccess, strings.Join(starts, "; "))
		}
	}
	t.Logf("order %v: %s", order, strings.Join(starts, "; "))

	eventually(t, "status.rollout Complete with every cluster Succeeded, current == target revision, progress 3/3", convergeTimeout,
		rolloutIs(in, "web", flotillav1.RolloutPhaseComplete, allSucceeded(in.Members), settled(len(in.Members))))
	eventually(t, "image "+rolledImage+" rolled out in every member", convergeTimeout, deploymentsRolledOut(in, "web", rolled))
	after, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("the rollout recreated member Deployments: %v", err)
	}
}

// failedRollout is the start of ProgressiveFailureSpec and
// ProgressiveRollbackSpec: a Duplicated MyApp of 2 per member, rolled out
// Progressively with a 20s progress deadline and no failure tolerated,
// gets the failing image. It returns the first member (the one that
// updates first), the others, and their Deployments' identities before the
// change. While the rollout runs, a watcher fails the spec if an other
// member's Deployment changes at all.
func failedRollout(t *testing.T, in SpecInput, onFailure flotillav1.RolloutFailureAction) (first string, others []string, before map[string]objectID, stop func()) {
	t.Helper()
	requireMembers(t, in, 3)
	createMyApp(t, in, progressiveApp(in, 2, duplicated(), flotillav1.ProgressiveRollout{
		MaxConcurrency:   ptr.To(intstr.FromInt32(1)),
		ProgressDeadline: &metav1.Duration{Duration: 20 * time.Second},
		MaxFailures:      ptr.To(intstr.FromInt32(0)),
		OnFailure:        onFailure,
	}))
	w := each(in.Members, 2)
	before = startRollout(t, in, w)
	// With no order, clusters go by name.
	sorted := append([]string(nil), in.Members...)
	sort.Strings(sorted)
	first, others = sorted[0], sorted[1:]

	// The other members' Deployments must never change: same UID and
	// generation (a template change bumps it), old image, all available.
	untouched := func() error {
		now, err := deploymentIDs(context.Background(), in, "web", others...)
		if err != nil {
			return err
		}
		if err := sameUIDs(map[string]objectID{others[0]: before[others[0]], others[1]: before[others[1]]}, now, true); err != nil {
			return err
		}
		return deploymentsIn(in, others, "web", want(w))()
	}
	done := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		for {
			select {
			case <-done:
				watched <- nil
				return
			case <-time.After(pollInterval):
			}
			if err := untouched(); err != nil {
				watched <- err
				return
			}
		}
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(done) }) })
	stop = func() {
		t.Helper()
		once.Do(func() { close(done) })
		if err := <-watched; err != nil {
			t.Fatalf("members %v, which the rollout never reached, changed: %v", others, err)
		}
		consistently(t, fmt.Sprintf("members %v keeping %s, unchanged and fully available", others, baseImage), 10*time.Second, untouched)
	}

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Image = failImage })
	eventually(t, fmt.Sprintf("%s's Deployment switching to %s", first, failImage), convergeTimeout, func() error {
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(first).Get(context.Background(), client.ObjectKey{Namespace: in.Namespace, Name: "web"}, d); err != nil {
			return err
		}
		if img := imageOf(d); img != failImage {
			return fmt.Errorf("image %s", img)
		}
		return nil
	})
	return first, others, before, stop
}

// failedWithMessage checks that cluster is Failed in status.rollout with a
// message naming the progress deadline.
func failedWithMessage(cluster string) func(*flotillav1.MyApp) error {
	return func(app *flotillav1.MyApp) error {
		for _, c := range app.Status.Rollout.Clusters {
			if c.Name == cluster {
				if c.Phase != flotillav1.ClusterRolloutFailed || !strings.Contains(c.Message, "progress deadline") {
					return fmt.Errorf("%s %s (%q), want Failed with a message about the progress deadline", c.Name, c.Phase, c.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("no cluster %s", cluster)
	}
}

// progressingReason checks that the MyApp's Progressing condition, for its
// generation, has reason.
func progressingReason(in SpecInput, name, reason string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionProgressing)
		if c == nil || c.Reason != reason || c.ObservedGeneration != app.Generation {
			return fmt.Errorf("Progressing condition %s (generation %d), want reason %s", conditionString(c), app.Generation, reason)
		}
		return nil
	}
}

// ProgressiveFailureSpec: a failing image (flotilla-fail, never Ready on
// the testbed), progressDeadline 20s, maxFailures 0, onFailure Pause: the
// first member's Deployment switches to it and, 20s on, that cluster is
// Failed with a message about the progress deadline and the rollout
// stops: phase Failed, the Progressing condition reason Failed. The first
// member keeps the failing template (its old pods still serving); the
// other two members' Deployments never change (same generation, old
// image, every replica available) during the rollout and for 10s after
// it failed.
func ProgressiveFailureSpec(t *testing.T, in SpecInput) {
	first, others, _, stop := failedRollout(t, in, flotillav1.RolloutFailurePause)
	pending := map[string]flotillav1.ClusterRolloutPhase{first: flotillav1.ClusterRolloutFailed}
	for _, m := range others {
		pending[m] = flotillav1.ClusterRolloutPending
	}
	eventually(t, fmt.Sprintf("status.rollout Failed with %s Failed and the others Pending", first), convergeTimeout,
		rolloutIs(in, "web", flotillav1.RolloutPhaseFailed, pending, failedWithMessage(first)))
	eventually(t, "the Progressing condition reason Failed", convergeTimeout, progressingReason(in, "web", flotillav1.ReasonRolloutFailed))
	app, err := getMyApp(context.Background(), in, "web")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollout: %s", rolloutString(app.Status.Rollout))
	stop()
	// The failed member stays on the failing template; its old pods serve.
	d := &appsv1.Deployment{}
	if err := in.Provider.Member(first).Get(context.Background(), client.ObjectKey{Namespace: in.Namespace, Name: "web"}, d); err != nil {
		t.Fatal(err)
	}
	if img := imageOf(d); img != failImage || d.Status.AvailableReplicas != 2 {
		t.Fatalf("%s's Deployment: image %s, %d available; want %s with its 2 old replicas available", first, img, d.Status.AvailableReplicas, failImage)
	}
	eventually(t, "status.rollout still Failed", convergeTimeout, rolloutIs(in, "web", flotillav1.RolloutPhaseFailed, pending, nil))
}

// ProgressiveRollbackSpec: the failure of ProgressiveFailureSpec with
// onFailure Rollback: the rollout ends RolledBack (Progressing reason
// RolledBack) with the first member Failed, back on the current (old)
// revision, its Deployment's template back to the old image with every
// replica updated, ready and available, in the same Deployment; the other
// two members' Deployments never change, during the rollout and for 10s
// after.
func ProgressiveRollbackSpec(t *testing.T, in SpecInput) {
	first, others, before, stop := failedRollout(t, in, flotillav1.RolloutFailureRollback)
	phases := map[string]flotillav1.ClusterRolloutPhase{first: flotillav1.ClusterRolloutFailed}
	for _, m := range others {
		phases[m] = flotillav1.ClusterRolloutPending
	}
	eventually(t, fmt.Sprintf("status.rollout RolledBack with %s Failed and back on the current revision", first), convergeTimeout,
		rolloutIs(in, "web", flotillav1.RolloutPhaseRolledBack, phases, func(app *flotillav1.MyApp) error {
			if err := failedWithMessage(first)(app); err != nil {
				return err
			}
			ro := app.Status.Rollout
			for _, c := range ro.Clusters {
				if c.Revision != ro.CurrentRevision {
					return fmt.Errorf("cluster %s on revision %s, want the current %s", c.Name, c.Revision, ro.CurrentRevision)
				}
			}
			if ro.CurrentRevision == ro.TargetRevision {
				return fmt.Errorf("current and target revisions are both %s", ro.CurrentRevision)
			}
			return nil
		}))
	eventually(t, "the Progressing condition reason RolledBack", convergeTimeout, progressingReason(in, "web", flotillav1.ReasonRolledBack))
	eventually(t, fmt.Sprintf("%s's Deployment back on %s with every replica available", first, baseImage), convergeTimeout,
		deploymentsIn(in, []string{first}, "web", want(map[string]int32{first: 2})))
	app, err := getMyApp(context.Background(), in, "web")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollout: %s", rolloutString(app.Status.Rollout))
	stop()
	eventually(t, "every member on "+baseImage+" with every replica available", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, 2))))
	after, err := deploymentIDs(context.Background(), in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("the rollback recreated member Deployments: %v", err)
	}
	eventually(t, "status.rollout still RolledBack", convergeTimeout, rolloutIs(in, "web", flotillav1.RolloutPhaseRolledBack, phases, nil))
}

// ProgressivePausedSpec: a MyApp Divided 2/2/2 over three members, rolled
// out Progressively, gets spec.rollout.paused true, then a new image: for
// 10s no member's Deployment changes (same generation, old image, every
// replica available), status.rollout is Paused with every cluster
// Pending and the Progressing condition's reason is Paused. With paused
// false again the rollout proceeds to Complete (current == target,
// progress 3/3) and every member runs the new image.
func ProgressivePausedSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	createMyApp(t, in, progressiveApp(in, 6, staticWeights(in.Members, 1, 1, 1), flotillav1.ProgressiveRollout{
		MaxConcurrency:   ptr.To(intstr.FromInt32(1)),
		ProgressDeadline: &metav1.Duration{Duration: 3 * time.Minute},
	}))
	w := each(in.Members, 2)
	eventually(t, "status.placement 2/2/2 for weights 1:1:1 of 6", convergeTimeout, placementIs(in, "web", w))
	before := startRollout(t, in, w)

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Rollout.Paused = true })
	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Image = rolledImage })
	pending := map[string]flotillav1.ClusterRolloutPhase{}
	for _, m := range in.Members {
		pending[m] = flotillav1.ClusterRolloutPending
	}
	paused := func() error {
		app, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		if app.Status.ObservedGeneration != app.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", app.Status.ObservedGeneration, app.Generation)
		}
		if err := rolloutIs(in, "web", flotillav1.RolloutPhasePaused, pending, func(app *flotillav1.MyApp) error {
			if ro := app.Status.Rollout; ro.CurrentRevision == ro.TargetRevision {
				return fmt.Errorf("current and target revisions are both %s", ro.CurrentRevision)
			}
			return nil
		})(); err != nil {
			return err
		}
		return progressingReason(in, "web", flotillav1.ReasonPaused)()
	}
	eventually(t, "status.rollout Paused with every cluster Pending and the Progressing condition reason Paused", convergeTimeout, paused)
	unchanged := func() error {
		now, err := deploymentIDs(ctx, in, "web", in.Members...)
		if err != nil {
			return err
		}
		if err := sameUIDs(before, now, true); err != nil {
			return err
		}
		return deploymentsRolledOut(in, "web", want(w))()
	}
	consistently(t, "every member's Deployment unchanged on "+baseImage+" and the rollout Paused while paused", 10*time.Second, func() error {
		if err := unchanged(); err != nil {
			return err
		}
		return paused()
	})

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Rollout.Paused = false })
	rolled := map[string]deployWant{}
	for m, n := range w {
		rolled[m] = deployWant{replicas: n, image: rolledImage}
	}
	eventually(t, "once unpaused, image "+rolledImage+" rolled out in every member", rolloutTimeout, deploymentsRolledOut(in, "web", rolled))
	eventually(t, "once unpaused, status.rollout Complete with every cluster Succeeded, current == target revision, progress 3/3", convergeTimeout,
		rolloutIs(in, "web", flotillav1.RolloutPhaseComplete, allSucceeded(in.Members), settled(len(in.Members))))
	after, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("the rollout recreated member Deployments: %v", err)
	}
}
