package rollout

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/fixture"
)

// The shared fixtures, under the names the tests use.
var (
	t0           = fixture.Now
	readyMember  = fixture.ReadyMember
	condition    = fixture.Condition
	reportedWork = fixture.ReportedWork
)

// spec is a Progressive MyApp spec running image; opts change its policy.
func progressiveSpec(image string, opts ...func(*flotillav1.ProgressiveRollout)) *flotillav1.MyAppSpec {
	p := &flotillav1.ProgressiveRollout{}
	for _, o := range opts {
		o(p)
	}
	return &flotillav1.MyAppSpec{Image: image, Replicas: ptr.To[int32](2),
		Rollout: &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: p}}
}

// rev is the revision name of image.
func rev(image string) string { return Revision(&flotillav1.MyAppSpec{Image: image}).Name }

// testKey is the revision key the tests sign with.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// tmpl is image's revision template, signed with testKey.
func tmpl(image string) flotillav1.RevisionTemplate {
	rt := Revision(&flotillav1.MyAppSpec{Image: image})
	Sign(&rt, testKey)
	return rt
}

// cstat is a cluster's rollout entry; started is how long ago it started.
func cstat(name, image string, phase flotillav1.ClusterRolloutPhase, started ...time.Duration) flotillav1.ClusterRolloutStatus {
	c := flotillav1.ClusterRolloutStatus{Name: name, Revision: rev(image), Phase: phase}
	if len(started) > 0 {
		c.StartTime = ptr.To(metav1.NewTime(t0.Add(-started[0])))
	}
	if len(started) > 1 {
		c.AvailableTime = ptr.To(metav1.NewTime(t0.Add(-started[1])))
	}
	return c
}

// rolling is a rollout from image "v1" to "v2" with the given clusters.
func rolling(clusters ...flotillav1.ClusterRolloutStatus) *flotillav1.RolloutStatus {
	return &flotillav1.RolloutStatus{
		CurrentRevision: rev("v1"), TargetRevision: rev("v2"), Phase: flotillav1.RolloutPhaseProgressing,
		Clusters: clusters, Revisions: []flotillav1.RevisionTemplate{tmpl("v1"), tmpl("v2")},
	}
}

// target is a Ready cluster whose Work renders image's revision; ready
// replicas of 2 are reported updated and available (-1: not reported).
func target(name, image string, ready int32, conds ...metav1.Condition) Target {
	t := Target{Name: name, Member: readyMember(name), Assigned: 2}
	if ready < 0 {
		t.Work = &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{Generation: 2, Labels: map[string]string{flotillav1.LabelRevision: rev(image)}}}
		return t
	}
	t.Work = reportedWork(flotillav1.WorkloadStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: ready, AvailableReplicas: ready}, conds...)
	t.Work.Labels = map[string]string{flotillav1.LabelRevision: rev(image)}
	return t
}

func labelled(t Target, k, v string) Target {
	t.Member.Labels = map[string]string{k: v}
	return t
}

// want is the expected phase and revision image of each cluster.
type wantCluster struct {
	image string
	phase flotillav1.ClusterRolloutPhase
}

func TestProgressiveRollout(t *testing.T) {
	deadlineExceeded := condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonProgressDeadlineExceeded, `Deployment "web" exceeded its progress deadline`)
	canaryFirst := func(p *flotillav1.ProgressiveRollout) {
		p.Order = []flotillav1.RolloutGroup{{Name: "canary", Clusters: flotillav1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "canary"}}}}}
	}
	tests := []struct {
		name        string
		prev        *flotillav1.RolloutStatus
		spec        *flotillav1.MyAppSpec
		targets     []Target
		wantPhase   flotillav1.RolloutPhase
		want        map[string]wantCluster
		wantCurrent string
		progress    string
		requeue     time.Duration
		message     []string
	}{{
		name:      "first creation is not a rollout",
		spec:      progressiveSpec("v1"),
		targets:   []Target{{Name: "a", Member: readyMember("a")}, {Name: "b", Member: readyMember("b")}},
		wantPhase: flotillav1.RolloutPhaseComplete, wantCurrent: "v1", progress: "2/2",
		want: map[string]wantCluster{"a": {"v1", flotillav1.ClusterRolloutSucceeded}, "b": {"v1", flotillav1.ClusterRolloutSucceeded}},
	}, {
		name: "a new revision starts one cluster, by name",
		prev: &flotillav1.RolloutStatus{CurrentRevision: rev("v1"), TargetRevision: rev("v1"), Phase: flotillav1.RolloutPhaseComplete,
			Clusters:  []flotillav1.ClusterRolloutStatus{cstat("a", "v1", flotillav1.ClusterRolloutSucceeded), cstat("b", "v1", flotillav1.ClusterRolloutSucceeded), cstat("c", "v1", flotillav1.ClusterRolloutSucceeded)},
			Revisions: []flotillav1.RevisionTemplate{tmpl("v1")}},
		spec:      progressiveSpec("v2"),
		targets:   []Target{target("a", "v1", 2), target("b", "v1", 2), target("c", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/3", requeue: 10 * time.Minute,
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutUpdating}, "b": {"v1", flotillav1.ClusterRolloutPending}, "c": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "the canary group goes first",
		prev:      rolling(cstat("a", "v1", flotillav1.ClusterRolloutPending), cstat("b", "v1", flotillav1.ClusterRolloutPending), cstat("c", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2", canaryFirst),
		targets:   []Target{target("a", "v1", 2), target("b", "v1", 2), labelled(target("c", "v1", 2), "tier", "canary")},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/3",
		want: map[string]wantCluster{"a": {"v1", flotillav1.ClusterRolloutPending}, "b": {"v1", flotillav1.ClusterRolloutPending}, "c": {"v2", flotillav1.ClusterRolloutUpdating}},
	}, {
		name:      "the rest waits for the whole group even with free slots",
		prev:      rolling(cstat("a", "v1", flotillav1.ClusterRolloutPending), cstat("b", "v2", flotillav1.ClusterRolloutSucceeded, time.Minute), cstat("c", "v2", flotillav1.ClusterRolloutUpdating, time.Minute)),
		spec:      progressiveSpec("v2", canaryFirst, func(p *flotillav1.ProgressiveRollout) { p.MaxConcurrency = ptr.To(intstr.FromString("100%")) }),
		targets:   []Target{target("a", "v1", 2), labelled(target("b", "v2", 2), "tier", "canary"), labelled(target("c", "v2", 1), "tier", "canary")},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "1/3",
		want: map[string]wantCluster{"a": {"v1", flotillav1.ClusterRolloutPending}, "b": {"v2", flotillav1.ClusterRolloutSucceeded}, "c": {"v2", flotillav1.ClusterRolloutUpdating}},
	}, {
		name:      "maxConcurrency 50% of 4 starts two",
		prev:      rolling(cstat("a", "v1", flotillav1.ClusterRolloutPending), cstat("b", "v1", flotillav1.ClusterRolloutPending), cstat("c", "v1", flotillav1.ClusterRolloutPending), cstat("d", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2", func(p *flotillav1.ProgressiveRollout) { p.MaxConcurrency = ptr.To(intstr.FromString("50%")) }),
		targets:   []Target{target("a", "v1", 2), target("b", "v1", 2), target("c", "v1", 2), target("d", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/4",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutUpdating}, "b": {"v2", flotillav1.ClusterRolloutUpdating}, "c": {"v1", flotillav1.ClusterRolloutPending}, "d": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "a Work not yet reported on the new revision keeps the cluster updating",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2"),
		targets:   []Target{target("a", "v1", 2), target("b", "v1", 2)}, // the cache still has the old Work
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/2", requeue: 9 * time.Minute,
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutUpdating}, "b": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name: "available and minSuccessTime not yet over: still updating",
		prev: rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute, 10*time.Second), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec: progressiveSpec("v2", func(p *flotillav1.ProgressiveRollout) {
			p.MinSuccessTime = &metav1.Duration{Duration: 30 * time.Second}
		}),
		targets:   []Target{target("a", "v2", 2), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/2", requeue: 20 * time.Second,
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutUpdating}, "b": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name: "minSuccessTime over: succeeded, and the next wave starts",
		prev: rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute, 30*time.Second), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec: progressiveSpec("v2", func(p *flotillav1.ProgressiveRollout) {
			p.MinSuccessTime = &metav1.Duration{Duration: 30 * time.Second}
		}),
		targets:   []Target{target("a", "v2", 2), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "1/2",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutSucceeded}, "b": {"v2", flotillav1.ClusterRolloutUpdating}},
	}, {
		name: "unavailable again before minSuccessTime: the wait restarts",
		prev: rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute, 10*time.Second), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec: progressiveSpec("v2", func(p *flotillav1.ProgressiveRollout) {
			p.MinSuccessTime = &metav1.Duration{Duration: 30 * time.Second}
		}),
		targets:   []Target{target("a", "v2", 1), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/2",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutUpdating}, "b": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "progressDeadline passed: failed, and with maxFailures 0 the rollout stops",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, 11*time.Minute), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2"),
		targets:   []Target{target("a", "v2", 1), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseFailed, wantCurrent: "v1", progress: "0/2", message: []string{"a"},
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutFailed}, "b": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "the member reports ProgressDeadlineExceeded: failed at once",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2"),
		targets:   []Target{target("a", "v2", 0, deadlineExceeded), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseFailed, wantCurrent: "v1", progress: "0/2", message: []string{"more than the 0 tolerated"},
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutFailed}, "b": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "a failure within maxFailures: the rollout goes on",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2", func(p *flotillav1.ProgressiveRollout) { p.MaxFailures = ptr.To(intstr.FromInt32(1)) }),
		targets:   []Target{target("a", "v2", 0, deadlineExceeded), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/2",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutFailed}, "b": {"v2", flotillav1.ClusterRolloutUpdating}},
	}, {
		name:      "Rollback returns the updated clusters to the last good revision",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutSucceeded, time.Minute), cstat("b", "v2", flotillav1.ClusterRolloutUpdating, time.Minute), cstat("c", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v2", func(p *flotillav1.ProgressiveRollout) { p.OnFailure = flotillav1.RolloutFailureRollback }),
		targets:   []Target{target("a", "v2", 2), target("b", "v2", 0, deadlineExceeded), target("c", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseRolledBack, wantCurrent: "v1", progress: "0/3",
		want: map[string]wantCluster{"a": {"v1", flotillav1.ClusterRolloutPending}, "b": {"v1", flotillav1.ClusterRolloutFailed}, "c": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "paused: no new cluster starts",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutSucceeded, time.Minute), cstat("b", "v1", flotillav1.ClusterRolloutPending)),
		spec:      func() *flotillav1.MyAppSpec { s := progressiveSpec("v2"); s.Rollout.Paused = true; return s }(),
		targets:   []Target{target("a", "v2", 2), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhasePaused, wantCurrent: "v1", progress: "1/2",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutSucceeded}, "b": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "every cluster succeeded: complete, and the old template goes",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutSucceeded, time.Minute), cstat("b", "v2", flotillav1.ClusterRolloutUpdating, time.Minute)),
		spec:      progressiveSpec("v2"),
		targets:   []Target{target("a", "v2", 2), target("b", "v2", 2)},
		wantPhase: flotillav1.RolloutPhaseComplete, wantCurrent: "v2", progress: "2/2",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutSucceeded}, "b": {"v2", flotillav1.ClusterRolloutSucceeded}},
	}, {
		name:      "a cluster joining mid-rollout starts on the last good revision",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, time.Minute)),
		spec:      progressiveSpec("v2"),
		targets:   []Target{target("a", "v2", 1), {Name: "z", Member: readyMember("z"), Assigned: 2}},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/2",
		want: map[string]wantCluster{"a": {"v2", flotillav1.ClusterRolloutUpdating}, "z": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name:      "a superseding revision: untouched clusters go straight to it, updated ones wait",
		prev:      rolling(cstat("a", "v2", flotillav1.ClusterRolloutSucceeded, time.Minute), cstat("b", "v2", flotillav1.ClusterRolloutUpdating, time.Minute), cstat("c", "v1", flotillav1.ClusterRolloutPending)),
		spec:      progressiveSpec("v3", func(p *flotillav1.ProgressiveRollout) { p.MaxConcurrency = ptr.To(intstr.FromInt32(1)) }),
		targets:   []Target{target("a", "v2", 2), target("b", "v2", 1), target("c", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "0/3",
		want: map[string]wantCluster{"a": {"v3", flotillav1.ClusterRolloutUpdating}, "b": {"v2", flotillav1.ClusterRolloutPending}, "c": {"v1", flotillav1.ClusterRolloutPending}},
	}, {
		name: "reverting to the last good revision after a failure brings the failed clusters back",
		prev: func() *flotillav1.RolloutStatus {
			s := rolling(cstat("a", "v2", flotillav1.ClusterRolloutFailed, 11*time.Minute), cstat("b", "v1", flotillav1.ClusterRolloutPending))
			s.Phase = flotillav1.RolloutPhaseFailed
			return s
		}(),
		spec:      progressiveSpec("v1"),
		targets:   []Target{target("a", "v2", 0), target("b", "v1", 2)},
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1", progress: "1/2",
		want: map[string]wantCluster{"a": {"v1", flotillav1.ClusterRolloutUpdating}, "b": {"v1", flotillav1.ClusterRolloutSucceeded}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before *flotillav1.RolloutStatus
			if tt.prev != nil {
				before = tt.prev.DeepCopy()
			}
			res := Step(tt.prev, tt.spec, tt.targets, t0, testKey)
			if tt.prev != nil && !equalRollout(before, tt.prev) {
				t.Errorf("the previous status was modified")
			}
			st := res.Status
			if st.Phase != tt.wantPhase || st.CurrentRevision != rev(tt.wantCurrent) || st.TargetRevision != rev(tt.spec.Image) || st.Progress != tt.progress {
				t.Errorf("phase %s current %s target %s progress %s (%s), want %s %s %s %s", st.Phase, st.CurrentRevision, st.TargetRevision, st.Progress, st.Message,
					tt.wantPhase, rev(tt.wantCurrent), rev(tt.spec.Image), tt.progress)
			}
			if len(st.Clusters) != len(tt.want) {
				t.Fatalf("clusters %+v, want %v", st.Clusters, tt.want)
			}
			for _, c := range st.Clusters {
				w := tt.want[c.Name]
				if c.Revision != rev(w.image) || c.Phase != w.phase {
					t.Errorf("cluster %s: %s/%s (%s), want %s(%s)/%s", c.Name, c.Revision, c.Phase, c.Message, rev(w.image), w.image, w.phase)
				}
				if res.Revisions[c.Name] == nil || res.Revisions[c.Name].Name != c.Revision {
					t.Errorf("cluster %s renders %+v, want revision %s", c.Name, res.Revisions[c.Name], c.Revision)
				}
				if c.Phase == flotillav1.ClusterRolloutUpdating && c.StartTime == nil {
					t.Errorf("cluster %s updating without a start time", c.Name)
				}
			}
			inUse := map[string]bool{st.CurrentRevision: true, st.TargetRevision: true}
			for _, c := range st.Clusters {
				inUse[c.Revision] = true
			}
			if len(st.Revisions) != len(inUse) || len(st.Revisions) > 3 {
				t.Errorf("revisions %d kept, %d in use", len(st.Revisions), len(inUse))
			}
			if tt.requeue != 0 && res.RequeueAfter != tt.requeue {
				t.Errorf("requeueAfter %s, want %s", res.RequeueAfter, tt.requeue)
			}
			for _, m := range tt.message {
				if !strings.Contains(st.Message, m) {
					t.Errorf("message %q does not contain %q", st.Message, m)
				}
			}
		})
	}
}

func equalRollout(a, b *flotillav1.RolloutStatus) bool {
	return a.Phase == b.Phase && a.TargetRevision == b.TargetRevision && len(a.Clusters) == len(b.Clusters) &&
		(len(a.Clusters) == 0 || a.Clusters[0] == b.Clusters[0] || (a.Clusters[0].Phase == b.Clusters[0].Phase && a.Clusters[0].Revision == b.Clusters[0].Revision))
}

// TestRevisionIgnoresReplicas: replicas, in the spec or in overrides, are
// not part of a revision; image, template and image / env overrides are.
func TestRevisionIgnoresReplicas(t *testing.T) {
	base := func() *flotillav1.MyAppSpec {
		return &flotillav1.MyAppSpec{Image: "web:1", Replicas: ptr.To[int32](2), Overrides: []flotillav1.ClusterOverride{{
			Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"a"}}, Env: []corev1.EnvVar{{Name: "R", Value: "eu"}},
		}}}
	}
	r0 := Revision(base()).Name
	if len(r0) != 10 {
		t.Errorf("revision %q, want 10 hex characters", r0)
	}
	same := []func(*flotillav1.MyAppSpec){
		func(s *flotillav1.MyAppSpec) { s.Replicas = ptr.To[int32](9) },
		func(s *flotillav1.MyAppSpec) { s.Overrides[0].Replicas = ptr.To[int32](5) },
		func(s *flotillav1.MyAppSpec) {
			s.Overrides = append(s.Overrides, flotillav1.ClusterOverride{Name: "big", Replicas: ptr.To[int32](7)})
		},
	}
	for i, f := range same {
		s := base()
		f(s)
		if got := Revision(s).Name; got != r0 {
			t.Errorf("replica change %d changed the revision: %s -> %s", i, r0, got)
		}
	}
	differ := []func(*flotillav1.MyAppSpec){
		func(s *flotillav1.MyAppSpec) { s.Image = "web:2" },
		func(s *flotillav1.MyAppSpec) { s.Template = &flotillav1.PodTemplate{Args: []string{"-v"}} },
		func(s *flotillav1.MyAppSpec) { s.Overrides[0].Env[0].Value = "us" },
		func(s *flotillav1.MyAppSpec) { s.Overrides[0].Image = &flotillav1.ImageOverride{Tag: "2"} },
		// What runs where: an override with only a node selector or only
		// tolerations is part of the revision, unlike one with only replicas.
		func(s *flotillav1.MyAppSpec) {
			s.Overrides = append(s.Overrides, flotillav1.ClusterOverride{Name: "gpu", NodeSelector: map[string]string{"gpu": "true"}})
		},
		func(s *flotillav1.MyAppSpec) {
			s.Overrides = append(s.Overrides, flotillav1.ClusterOverride{Name: "tainted", Tolerations: []corev1.Toleration{{Key: "team", Value: "a"}}})
		},
	}
	for i, f := range differ {
		s := base()
		f(s)
		if got := Revision(s).Name; got == r0 {
			t.Errorf("change %d kept the revision %s", i, r0)
		}
	}
}
