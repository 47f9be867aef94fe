package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

const (
	imageV1 = "registry.example.com/team/web:1.0"
	imageV2 = "registry.example.com/team/web:2.0"
	imageV3 = "registry.example.com/team/web:3.0"
)

var members3 = []string{"member-1", "member-2", "member-3"}

// progressiveApp is a Duplicated MyApp (1 replica per cluster) on the given
// clusters that rolls out Progressively; policy changes the defaults.
func progressiveApp(name string, clusters []string, policy func(*flotillav1.RolloutPolicy)) *flotillav1.MyApp {
	app := newApp(name, 1, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: clusters}})
	app.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &flotillav1.ProgressiveRollout{}}
	if policy != nil {
		policy(app.Spec.Rollout)
	}
	return app
}

// rolloutEnv drives Progressive MyApps on a hub with three Ready members
// whose agents' reports the test writes.
type rolloutEnv struct {
	t   *testing.T
	env *hubEnv
}

func newRolloutEnv(t *testing.T) *rolloutEnv {
	env := newHubEnv(t, nil)
	hb := startHeartbeats(t, env.hub.Tracker)
	createMembers(t, env.c, members3...)
	for _, n := range members3 {
		hb.connect(n, nil)
	}
	waitReady(t, env.c, members3...)
	return &rolloutEnv{t: t, env: env}
}

func (r *rolloutEnv) get(app *flotillav1.MyApp) *flotillav1.MyApp {
	r.t.Helper()
	got := &flotillav1.MyApp{}
	if err := r.env.c.Get(context.Background(), client.ObjectKeyFromObject(app), got); err != nil {
		r.t.Fatal(err)
	}
	return got
}

// update changes app's spec with retries on conflict.
func (r *rolloutEnv) update(app *flotillav1.MyApp, change func(*flotillav1.MyApp)) {
	r.t.Helper()
	updateMyApp(r.t, r.env.c, app, change)
}

// updateMyApp applies change to the stored MyApp named like app, retrying
// on conflicts, and fails t naming the MyApp when it cannot.
func updateMyApp(t *testing.T, c client.Client, app *flotillav1.MyApp, change func(*flotillav1.MyApp)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &flotillav1.MyApp{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		change(got)
		return c.Update(context.Background(), got)
	})
	if err != nil {
		t.Fatalf("updating MyApp %s: %v", app.Name, err)
	}
}

// images returns the image each cluster's Work runs.
func (r *rolloutEnv) images(app *flotillav1.MyApp) (map[string]string, error) {
	deps, err := workDeployments(r.env.c, app)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for cl, d := range deps {
		out[cl] = d.Spec.Template.Spec.Containers[0].Image
	}
	return out, nil
}

// wantImages waits until the Works run exactly want.
func (r *rolloutEnv) wantImages(app *flotillav1.MyApp, want map[string]string) {
	r.t.Helper()
	eventually(r.t, fmt.Sprintf("Works of %s running %v", app.Name, want), 30*time.Second, func() error {
		return r.imagesAre(app, want)
	})
}

func (r *rolloutEnv) imagesAre(app *flotillav1.MyApp, want map[string]string) error {
	got, err := r.images(app)
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("images %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("images %v, want %v", got, want)
		}
	}
	return nil
}

// keepImages checks that the Works keep running want for a while.
func (r *rolloutEnv) keepImages(app *flotillav1.MyApp, want map[string]string, d time.Duration) {
	r.t.Helper()
	consistently(r.t, fmt.Sprintf("Works of %s running %v", app.Name, want), d, func() error { return r.imagesAre(app, want) })
}

// wantRollout waits until status.rollout has phase and the cluster phases
// (cluster -> phase), and no more than maxUpdating clusters updating.
func (r *rolloutEnv) wantRollout(app *flotillav1.MyApp, phase flotillav1.RolloutPhase, clusters map[string]flotillav1.ClusterRolloutPhase) *flotillav1.MyApp {
	r.t.Helper()
	var got *flotillav1.MyApp
	eventually(r.t, fmt.Sprintf("rollout of %s %s with clusters %v", app.Name, phase, clusters), 30*time.Second, func() error {
		got = r.get(app)
		ro := got.Status.Rollout
		if ro == nil {
			return fmt.Errorf("no status.rollout")
		}
		desc := fmt.Sprintf("phase %s (%s) clusters %+v", ro.Phase, ro.Message, ro.Clusters)
		if ro.Phase != phase {
			return fmt.Errorf("%s", desc)
		}
		if len(ro.Clusters) != len(clusters) {
			return fmt.Errorf("%s", desc)
		}
		for _, c := range ro.Clusters {
			if clusters[c.Name] != c.Phase {
				return fmt.Errorf("%s", desc)
			}
		}
		return nil
	})
	return got
}

// report feeds a member report for each cluster: its Deployment updated
// and ready (or, with degraded, failed), for the Work it holds now.
func (r *rolloutEnv) report(app *flotillav1.MyApp, degraded *metav1.Condition, clusters ...string) {
	r.t.Helper()
	for _, c := range clusters {
		ready := int32(0)
		if degraded == nil {
			deps, err := workDeployments(r.env.c, app)
			if err != nil || deps[c] == nil {
				r.t.Fatalf("the Deployment of %s in %s's Work: %v", app.Name, c, err)
			}
			ready = *deps[c].Spec.Replicas
		}
		reportWork(r.t, r.env, c, app, ready, degraded)
	}
}

func deadlineExceeded() *metav1.Condition {
	return &metav1.Condition{Type: flotillav1.ConditionDegraded, Status: metav1.ConditionTrue,
		Reason: flotillav1.ReasonProgressDeadlineExceeded, Message: `Deployment "web" has timed out progressing.`}
}

// start creates app, lets every cluster report it healthy and waits until
// the first revision is Complete everywhere.
func (r *rolloutEnv) start(app *flotillav1.MyApp) {
	r.t.Helper()
	if err := r.env.c.Create(context.Background(), app); err != nil {
		r.t.Fatalf("creating MyApp %s: %v", app.Name, err)
	}
	clusters := app.Spec.Placement.ClusterAffinity.ClusterNames
	want := map[string]string{}
	phases := map[string]flotillav1.ClusterRolloutPhase{}
	for _, c := range clusters {
		want[c], phases[c] = imageV1, flotillav1.ClusterRolloutSucceeded
	}
	r.wantImages(app, want)
	r.report(app, nil, clusters...)
	got := r.wantRollout(app, flotillav1.RolloutPhaseComplete, phases)
	if ro := got.Status.Rollout; ro.CurrentRevision != ro.TargetRevision || len(ro.Revisions) != 1 || ro.Progress != fmt.Sprintf("%d/%d", len(clusters), len(clusters)) {
		r.t.Fatalf("first revision: %+v", ro)
	}
}

func setImage(image string) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.Image = image }
}

const (
	pending   = flotillav1.ClusterRolloutPending
	updating  = flotillav1.ClusterRolloutUpdating
	succeeded = flotillav1.ClusterRolloutSucceeded
	failed    = flotillav1.ClusterRolloutFailed
)

// progressingReason waits for app's Progressing condition to give reason
// (it is written just after status.rollout).
func (r *rolloutEnv) progressingReason(app *flotillav1.MyApp, reason string) {
	r.t.Helper()
	eventually(r.t, "Progressing with reason "+reason, 30*time.Second, func() error {
		c := meta.FindStatusCondition(r.get(app).Status.Conditions, flotillav1.ConditionProgressing)
		if c == nil || c.Reason != reason {
			return fmt.Errorf("Progressing %+v", c)
		}
		return nil
	})
}

// TestProgressiveRollout drives Progressive rollouts on a real hub
// apiserver with the members' reports written by the test: each rule of
// the rollout in its own MyApp.
func TestProgressiveRollout(t *testing.T) {
	r := newRolloutEnv(t)
	all := func(image string) map[string]string {
		return map[string]string{"member-1": image, "member-2": image, "member-3": image}
	}

	t.Run("waves of one, canary group first, then by name", func(t *testing.T) {
		r.t = t
		app := progressiveApp("waves", members3, func(p *flotillav1.RolloutPolicy) {
			p.Progressive.Order = []flotillav1.RolloutGroup{{Name: "canary", Clusters: flotillav1.ClusterAffinity{ClusterNames: []string{"member-3"}}}}
		})
		r.start(app)
		r.update(app, setImage(imageV2))
		steps := []struct {
			next  string
			after map[string]string
		}{
			{"member-3", map[string]string{"member-1": imageV1, "member-2": imageV1, "member-3": imageV2}},
			{"member-1", map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV2}},
			{"member-2", all(imageV2)},
		}
		done := map[string]bool{}
		for _, s := range steps {
			r.wantImages(app, s.after)
			phases := map[string]flotillav1.ClusterRolloutPhase{}
			for _, c := range members3 {
				phases[c] = pending
				if done[c] {
					phases[c] = succeeded
				}
			}
			phases[s.next] = updating
			r.wantRollout(app, flotillav1.RolloutPhaseProgressing, phases)
			r.progressingReason(app, flotillav1.ReasonRollingOut)
			// Never more than one cluster updating: the rest stays put
			// until the member reports.
			r.keepImages(app, s.after, time.Second)
			r.report(app, nil, s.next)
			done[s.next] = true
		}
		got := r.wantRollout(app, flotillav1.RolloutPhaseComplete, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": succeeded, "member-3": succeeded})
		ro := got.Status.Rollout
		if ro.CurrentRevision != ro.TargetRevision || len(ro.Revisions) != 1 || ro.Revisions[0].Image != imageV2 || ro.Progress != "3/3" {
			t.Fatalf("complete rollout: %+v", ro)
		}
	})

	t.Run("minSuccessTime holds a cluster in Updating", func(t *testing.T) {
		r.t = t
		app := progressiveApp("min-success", members3, func(p *flotillav1.RolloutPolicy) {
			p.Progressive.MinSuccessTime = &metav1.Duration{Duration: 4 * time.Second}
		})
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		r.report(app, nil, "member-1")
		got := r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": updating, "member-2": pending, "member-3": pending})
		eventually(t, "member-1 available, waiting out minSuccessTime", 30*time.Second, func() error {
			got = r.get(app)
			if c := got.Status.Rollout.Clusters[0]; c.AvailableTime == nil || c.Phase != updating {
				return fmt.Errorf("member-1 %+v", c)
			}
			return nil
		})
		// It became available at AvailableTime; it stays Updating, and
		// member-2 untouched, until minSuccessTime has passed.
		avail := got.Status.Rollout.Clusters[0].AvailableTime.Time
		for time.Since(avail) < 2*time.Second {
			got = r.get(app)
			if c := got.Status.Rollout.Clusters[0]; c.Phase != updating {
				t.Fatalf("member-1 %s %s after available since %s", c.Phase, time.Since(avail), avail)
			}
			if err := r.imagesAre(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": updating, "member-3": pending})
		got = r.get(app)
		if c := got.Status.Rollout.Clusters[0]; c.AvailableTime == nil || got.Status.Rollout.Clusters[1].StartTime.Sub(c.AvailableTime.Time) < 4*time.Second-time.Second {
			t.Fatalf("member-2 started at %v, member-1 available at %v: sooner than minSuccessTime", got.Status.Rollout.Clusters[1].StartTime, c.AvailableTime)
		}
	})

	t.Run("progressDeadline fails a cluster that does not become available", func(t *testing.T) {
		r.t = t
		app := progressiveApp("deadline", members3, func(p *flotillav1.RolloutPolicy) {
			p.Progressive.ProgressDeadline = &metav1.Duration{Duration: 3 * time.Second}
		})
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		reportWork(t, r.env, "member-1", app, 0, nil) // updating, not ready
		got := r.wantRollout(app, flotillav1.RolloutPhaseFailed, map[string]flotillav1.ClusterRolloutPhase{"member-1": failed, "member-2": pending, "member-3": pending})
		if m := got.Status.Rollout.Clusters[0].Message; !strings.Contains(m, "progress deadline") {
			t.Fatalf("member-1 message %q", m)
		}
		r.progressingReason(app, flotillav1.ReasonRolloutFailed)
	})

	t.Run("maxFailures 0 and Pause stop after the first failure", func(t *testing.T) {
		r.t = t
		app := progressiveApp("pause-on-failure", members3, nil)
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		r.report(app, deadlineExceeded(), "member-1")
		got := r.wantRollout(app, flotillav1.RolloutPhaseFailed, map[string]flotillav1.ClusterRolloutPhase{"member-1": failed, "member-2": pending, "member-3": pending})
		r.progressingReason(app, flotillav1.ReasonRolloutFailed)
		if m := got.Status.Rollout.Clusters[0].Message; !strings.Contains(m, "timed out progressing") {
			t.Fatalf("member-1 message %q does not carry the member's", m)
		}
		r.keepImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1}, 2*time.Second)
	})

	t.Run("Rollback returns the failed cluster to the last good image", func(t *testing.T) {
		r.t = t
		app := progressiveApp("rollback", members3, func(p *flotillav1.RolloutPolicy) {
			p.Progressive.OnFailure = flotillav1.RolloutFailureRollback
		})
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		r.report(app, deadlineExceeded(), "member-1")
		r.wantRollout(app, flotillav1.RolloutPhaseRolledBack, map[string]flotillav1.ClusterRolloutPhase{"member-1": failed, "member-2": pending, "member-3": pending})
		r.progressingReason(app, flotillav1.ReasonRolledBack)
		r.wantImages(app, all(imageV1))
		r.keepImages(app, all(imageV1), time.Second)
	})

	t.Run("paused holds the rollout", func(t *testing.T) {
		r.t = t
		app := progressiveApp("paused", members3, nil)
		r.start(app)
		r.update(app, func(a *flotillav1.MyApp) { a.Spec.Image, a.Spec.Rollout.Paused = imageV2, true })
		r.wantRollout(app, flotillav1.RolloutPhasePaused, map[string]flotillav1.ClusterRolloutPhase{"member-1": pending, "member-2": pending, "member-3": pending})
		r.progressingReason(app, flotillav1.ReasonPaused)
		r.keepImages(app, all(imageV1), 2*time.Second)
		r.update(app, func(a *flotillav1.MyApp) { a.Spec.Rollout.Paused = false })
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": updating, "member-2": pending, "member-3": pending})
	})

	t.Run("a replica change mid-rollout applies everywhere at once", func(t *testing.T) {
		r.t = t
		app := progressiveApp("scale", members3, nil)
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		before := r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": updating, "member-2": pending, "member-3": pending}).Status.Rollout.TargetRevision
		r.update(app, func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](3) })
		eventually(t, "every Work at 3 replicas", 30*time.Second, func() error {
			got, err := replicasByCluster(r.env.c, app)
			if err != nil {
				return err
			}
			return equalReplicas(got, map[string]int32{"member-1": 3, "member-2": 3, "member-3": 3})
		})
		r.keepImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1}, time.Second)
		got := r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": updating, "member-2": pending, "member-3": pending})
		if got.Status.Rollout.TargetRevision != before {
			t.Fatalf("a replica change made a new revision: %s -> %s", before, got.Status.Rollout.TargetRevision)
		}
		// The rollout goes on at the new replica count.
		r.report(app, nil, "member-1")
		r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": updating, "member-3": pending})
	})

	t.Run("a cluster joining mid-rollout starts on the last good revision", func(t *testing.T) {
		r.t = t
		app := progressiveApp("join", []string{"member-1", "member-2"}, nil)
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1})
		r.update(app, func(a *flotillav1.MyApp) { a.Spec.Placement.ClusterAffinity.ClusterNames = members3 })
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": updating, "member-2": pending, "member-3": pending})
		r.report(app, nil, "member-1", "member-3")
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV2, "member-3": imageV1})
		r.report(app, nil, "member-2")
		r.wantImages(app, all(imageV2))
		r.report(app, nil, "member-3")
		r.wantRollout(app, flotillav1.RolloutPhaseComplete, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": succeeded, "member-3": succeeded})
	})

	t.Run("a new revision mid-rollout supersedes the old one", func(t *testing.T) {
		r.t = t
		app := progressiveApp("supersede", members3, nil)
		r.start(app)
		r.update(app, setImage(imageV2))
		r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
		r.update(app, setImage(imageV3))
		// member-1, on the superseded revision, is next for the newest;
		// member-2 and member-3 never run 2.0.
		r.wantImages(app, map[string]string{"member-1": imageV3, "member-2": imageV1, "member-3": imageV1})
		got := r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": updating, "member-2": pending, "member-3": pending})
		if n := len(got.Status.Rollout.Revisions); n != 2 {
			t.Fatalf("%d revisions kept, want 2 (1.0 and 3.0): %+v", n, got.Status.Rollout.Revisions)
		}
		r.report(app, nil, "member-1")
		r.wantImages(app, map[string]string{"member-1": imageV3, "member-2": imageV3, "member-3": imageV1})
		r.report(app, nil, "member-2")
		r.wantImages(app, all(imageV3))
		r.report(app, nil, "member-3")
		got = r.wantRollout(app, flotillav1.RolloutPhaseComplete, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": succeeded, "member-3": succeeded})
		if ro := got.Status.Rollout; len(ro.Revisions) != 1 || ro.Revisions[0].Image != imageV3 {
			t.Fatalf("revisions %+v", ro.Revisions)
		}
	})
}

// startStoppableHub starts a hub manager against cfg and returns it with a
// function that stops it (also called when the test ends).
func startStoppableHub(t *testing.T, env *hubEnv) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hub, err := setup.New(ctx, setup.Options{
		Config: env.cfg, MetricsAddr: "0", ProbeAddr: "0", HeartbeatGrace: 2 * time.Second,
		Logger:     testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
		Registerer: newRegistry(), SkipNameValidation: true,
	})
	if err != nil {
		cancel()
		t.Fatalf("building the hub: %v", err)
	}
	env.hub = hub
	return runUntilStopped(t, "hub manager", cancel, func() error { return hub.Manager.Start(ctx) })
}

// TestProgressiveRolloutSurvivesHubRestart stops the hub mid-rollout and
// starts a new one on the same apiserver: it continues from status.rollout.
func TestProgressiveRolloutSurvivesHubRestart(t *testing.T) {
	c, cfg := startHubWithConfig(t)
	env := &hubEnv{c: c, cfg: cfg}
	stop := startStoppableHub(t, env)
	hb := startHeartbeats(t, env.hub.Tracker)
	createMembers(t, c, members3...)
	for _, n := range members3 {
		hb.connect(n, nil)
	}
	waitReady(t, c, members3...)
	r := &rolloutEnv{t: t, env: env}
	app := progressiveApp("restart", members3, nil)
	r.start(app)
	r.update(app, setImage(imageV2))
	r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})
	r.report(app, nil, "member-1")
	r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV2, "member-3": imageV1})
	before := r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": updating, "member-3": pending})

	stop()
	startStoppableHub(t, env)
	hb2 := startHeartbeats(t, env.hub.Tracker)
	for _, n := range members3 {
		hb2.connect(n, nil)
	}
	// The new hub keeps where the old one stood: member-2 still updating
	// since the same start time, member-3 untouched.
	r.keepImages(app, map[string]string{"member-1": imageV2, "member-2": imageV2, "member-3": imageV1}, 2*time.Second)
	after := r.wantRollout(app, flotillav1.RolloutPhaseProgressing, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": updating, "member-3": pending})
	if b, a := before.Status.Rollout.Clusters[1].StartTime, after.Status.Rollout.Clusters[1].StartTime; !b.Equal(a) {
		t.Fatalf("member-2's start time moved across the restart: %v -> %v", b, a)
	}
	r.report(app, nil, "member-2")
	r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV2, "member-3": imageV2})
	r.report(app, nil, "member-3")
	r.wantRollout(app, flotillav1.RolloutPhaseComplete, map[string]flotillav1.ClusterRolloutPhase{"member-1": succeeded, "member-2": succeeded, "member-3": succeeded})
}

// TestProgressiveRolloutStopsOnARealFailure runs a real hub and agents
// against member control planes with kwok: an image containing
// flotilla-fail never becomes Ready there, so the first cluster fails its
// progress deadline and the rollout stops, the other member keeping the
// old image.
func TestProgressiveRolloutStopsOnARealFailure(t *testing.T) {
	f := startFleet(t, 2)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	names := []string{"member-1", "member-2"}
	for _, m := range names {
		startAgent(t, f.agentOptions(t, m, syncAddr))
	}
	waitReady(t, f.hub, names...)

	app := progressiveApp("web", names, func(p *flotillav1.RolloutPolicy) {
		p.Progressive.ProgressDeadline = &metav1.Duration{Duration: 20 * time.Second}
	})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	get := func() *flotillav1.MyApp {
		got := &flotillav1.MyApp{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	image := func(member string) (string, int32, error) {
		d, err := f.deployment(ctx, member, "default", "web")
		if err != nil {
			return "", 0, err
		}
		return d.Spec.Template.Spec.Containers[0].Image, d.Status.ReadyReplicas, nil
	}
	eventually(t, "nginx:1.27 ready in both members and the MyApp Ready", 90*time.Second, func() error {
		for _, m := range names {
			img, ready, err := image(m)
			if err != nil || img != "nginx:1.27" || ready != 1 {
				return fmt.Errorf("%s: %s ready %d (%v)", m, img, ready, err)
			}
		}
		c := meta.FindStatusCondition(get().Status.Conditions, flotillav1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := get()
		got.Spec.Image = "nginx:flotilla-fail"
		return f.hub.Update(ctx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rollout Failed on member-1", 120*time.Second, func() error {
		ro := get().Status.Rollout
		if ro == nil || ro.Phase != flotillav1.RolloutPhaseFailed || len(ro.Clusters) != 2 {
			return fmt.Errorf("rollout %+v", ro)
		}
		if c := ro.Clusters[0]; c.Name != "member-1" || c.Phase != flotillav1.ClusterRolloutFailed || !strings.Contains(c.Message, "progress deadline") {
			return fmt.Errorf("member-1 %+v", c)
		}
		if c := ro.Clusters[1]; c.Phase != flotillav1.ClusterRolloutPending {
			return fmt.Errorf("member-2 %+v", c)
		}
		return nil
	})
	t.Logf("rollout: %s", get().Status.Rollout.Message)
	// member-1 really runs the failing image, its old pod still serving;
	// member-2 keeps the last good image.
	img, ready, err := image("member-1")
	if err != nil || img != "nginx:flotilla-fail" || ready != 1 {
		t.Fatalf("member-1: %s ready %d (%v)", img, ready, err)
	}
	d, err := f.deployment(ctx, "member-1", "default", "web")
	if err != nil || d.Status.UpdatedReplicas != 1 || d.Status.AvailableReplicas != 1 {
		t.Fatalf("member-1 Deployment status %+v (%v)", d.Status, err)
	}
	consistently(t, "member-2 on nginx:1.27", 3*time.Second, func() error {
		img, ready, err := image("member-2")
		if err != nil || img != "nginx:1.27" || ready != 1 {
			return fmt.Errorf("member-2: %s ready %d (%v)", img, ready, err)
		}
		return nil
	})
}

// TestProgressiveRolloutRefusesForgedTemplates: whoever may write
// myapps/status replaces the template of the revision rolling out with a
// pod spec of their own, keeping its name and digest. The hub must not
// render it: it drops the template (a RevisionRejected event says so) and
// goes on with the template it derives from the spec.
func TestProgressiveRolloutRefusesForgedTemplates(t *testing.T) {
	r := newRolloutEnv(t)
	ctx := context.Background()
	app := progressiveApp("forged", members3, nil)
	r.start(app)
	r.update(app, setImage(imageV2))
	r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV1, "member-3": imageV1})

	const evil = "registry.example.com/attacker/miner:latest"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := r.get(app)
		forged := false
		for i := range got.Status.Rollout.Revisions {
			if rt := &got.Status.Rollout.Revisions[i]; rt.Name == got.Status.Rollout.TargetRevision {
				rt.Image, forged = evil, true
			}
		}
		if !forged {
			return fmt.Errorf("no template for the target revision in %+v", got.Status.Rollout)
		}
		return r.env.c.Status().Update(ctx, got)
	})
	if err != nil {
		t.Fatalf("writing the forged template into status: %v", err)
	}

	eventually(t, "a RevisionRejected event on MyApp forged", 30*time.Second, func() error {
		var list eventsv1.EventList
		if err := r.env.c.List(ctx, &list, client.InNamespace(app.Namespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == app.Name && e.Reason == flotillav1.ReasonRevisionRejected {
				return nil
			}
		}
		return fmt.Errorf("%d events, none with reason %s about %s", len(list.Items), flotillav1.ReasonRevisionRejected, app.Name)
	})
	// The rollout goes on with the real v2; no Work ever runs the forged
	// image.
	noEvil := func() error {
		imgs, err := r.images(app)
		if err != nil {
			return err
		}
		for cl, img := range imgs {
			if img == evil {
				return fmt.Errorf("cluster %s's Work runs the forged image", cl)
			}
		}
		for _, rt := range r.get(app).Status.Rollout.Revisions {
			if rt.Image == evil {
				return fmt.Errorf("status.rollout still holds the forged template %s", rt.Name)
			}
		}
		return nil
	}
	eventually(t, "the forged template gone from status", 30*time.Second, noEvil)
	r.report(app, nil, "member-1")
	r.wantImages(app, map[string]string{"member-1": imageV2, "member-2": imageV2, "member-3": imageV1})
	if err := noEvil(); err != nil {
		t.Fatal(err)
	}
}
