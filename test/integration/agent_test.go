package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsetup "github.com/flotilla-dev/flotilla/agent/setup"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// fleet is a testbed hub and members with Flotilla's CRDs in the hub, the
// certificates for the hub and each member's agent, and clients.
type fleet struct {
	tb      *testbed.Testbed
	hub     client.Client
	hubCfg  *rest.Config
	members map[string]client.Client
	cfgs    map[string]*rest.Config
	certDir string
}

func startFleet(t *testing.T, members int) *fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Config{Dir: t.TempDir(), Hub: &testbed.ClusterSpec{Name: "hub"}, Members: testbed.DefaultMembers(members)})
	if err != nil {
		t.Fatalf("starting the testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stopping the testbed: %v", err)
		}
	})
	f := &fleet{tb: tb, members: map[string]client.Client{}, cfgs: map[string]*rest.Config{}, certDir: hubCerts(t)}
	ca, err := pki.EnsureCA(f.certDir)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	hubCfg, err := tb.Hub.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := installCRDs(hubCfg); err != nil {
		t.Fatal(err)
	}
	f.hubCfg = hubCfg
	if f.hub, err = client.New(hubCfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	for _, m := range tb.Members {
		cfg, err := m.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		f.members[m.Spec.Name], f.cfgs[m.Spec.Name] = c, cfg
		if _, err := pki.EnsureAgent(f.certDir, ca, m.Spec.Name); err != nil {
			t.Fatal(err)
		}
		mc := &flotillav1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: m.Spec.Name},
			Spec:       flotillav1.MemberClusterSpec{Region: m.Spec.Region, Zone: m.Spec.Zone, Provider: m.Spec.Provider},
		}
		if err := f.hub.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// agentOptions are the options of an in-process agent for member.
func (f *fleet) agentOptions(t *testing.T, member, hubAddr string) agentsetup.Options {
	return agentsetup.Options{
		Config:            f.cfgs[member],
		HubAddress:        hubAddr,
		CertFile:          filepath.Join(f.certDir, pki.AgentCertFile(member)),
		KeyFile:           filepath.Join(f.certDir, pki.AgentKeyFile(member)),
		CAFile:            filepath.Join(f.certDir, pki.CACertFile),
		MetricsAddr:       "0",
		ProbeAddr:         "0",
		HeartbeatInterval: 500 * time.Millisecond,
		ResourceInterval:  time.Second,
		CreateNamespaces:  true,
		Logger:            testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	}
}

// startAgent runs an in-process agent until the returned stop is called or
// the test ends.
func startAgent(t *testing.T, opts agentsetup.Options) (stop func()) {
	t.Helper()
	a, err := agentsetup.New(opts)
	if err != nil {
		t.Fatalf("building the agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return runUntilStopped(t, "agent", cancel, func() error { return a.Start(ctx) })
}

// startSyncHub runs an in-process hub with its sync server; it returns the
// hub, the address agents dial, and a stop function.
func (f *fleet) startSyncHub(t *testing.T, syncAddr string) (*setup.Hub, func()) {
	t.Helper()
	return f.startSyncHubWith(t, syncAddr, nil)
}

// startSyncHubWith is startSyncHub with options changed by mutate.
func (f *fleet) startSyncHubWith(t *testing.T, syncAddr string, mutate func(*setup.Options)) (*setup.Hub, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan string, 1)
	hub := func() *setup.Hub {
		opts := setup.Options{
			Config: f.hubCfg, MetricsAddr: "0", ProbeAddr: "0",
			SyncAddr: syncAddr, CertDir: f.certDir,
			HeartbeatGrace:     3 * time.Second,
			Logger:             testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
			Registerer:         newRegistry(),
			SkipNameValidation: true,
			OnSyncListening:    func(a string) { listening <- a },
		}
		if mutate != nil {
			mutate(&opts)
		}
		h, err := setup.New(ctx, opts)
		if err != nil {
			cancel()
			t.Fatalf("building the hub: %v", err)
		}
		return h
	}()
	done := make(chan error, 1)
	go func() { done <- hub.Manager.Start(ctx) }()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("hub stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("hub sync server not listening after 30s")
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("hub: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("hub did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	return hub, stop
}

// createWeb creates MyApp default/web (1 replica of nginx:1.27, placed
// anywhere) and waits for its Deployment in member-1; it returns the MyApp
// and that Deployment's UID.
func (f *fleet) createWeb(t *testing.T) (*flotillav1.MyApp, types.UID) {
	t.Helper()
	ctx := context.Background()
	app := newApp("web", 1, flotillav1.Placement{})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	var uid types.UID
	eventually(t, "Deployment web in member-1", 60*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			return err
		}
		uid = d.UID
		return nil
	})
	return app, uid
}

func (f *fleet) deployment(ctx context.Context, member, namespace, name string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	err := f.members[member].Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d)
	return d, err
}

// TestAgentAppliesReportsAndHoldsOn runs a real hub and agent over mTLS
// against real member control planes: a MyApp becomes a Deployment in the
// member whose readiness reaches the Work and the MyApp; a hand edit is
// set back; an unowned Deployment is left alone and reported; with the hub
// gone the Deployment keeps running untouched, and status catches up when a
// new hub comes.
func TestAgentAppliesReportsAndHoldsOn(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	_, stopHub := f.startSyncHub(t, syncAddr)
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1")

	app := newApp("web", 3, flotillav1.Placement{})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	var original *appsv1.Deployment
	eventually(t, "Deployment web in member-1 with 3 ready replicas", 60*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 3 {
			return fmt.Errorf("readyReplicas %d", d.Status.ReadyReplicas)
		}
		if d.Labels[flotillav1.LabelWork] != flotillav1.WorkLabelValue(flotillav1.WorkName("default", "web")) {
			return fmt.Errorf("labels %v", d.Labels)
		}
		original = d
		return nil
	})
	myAppReady := func() error {
		got := &flotillav1.MyApp{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue || got.Status.ReadyReplicas != 3 {
			// Say where the replicas stand on the way: the member's
			// Deployment and the Work status the agent reported.
			where := ""
			if d, err := f.deployment(ctx, "member-1", "default", "web"); err == nil {
				where = fmt.Sprintf("; member Deployment generation %d observed %d replicas %d ready %d", d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.ReadyReplicas)
			}
			w := &flotillav1.Work{}
			if err := f.hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.ClusterNamespace("member-1"), Name: flotillav1.WorkName("default", "web")}, w); err == nil && len(w.Status.Manifests) > 0 && w.Status.Manifests[0].Workload != nil {
				where += fmt.Sprintf("; Work reports %+v", *w.Status.Manifests[0].Workload)
			}
			return fmt.Errorf("ready %d, Ready %+v%s", got.Status.ReadyReplicas, c, where)
		}
		return nil
	}
	eventually(t, "MyApp Ready with 3 ready replicas from the member's report", 60*time.Second, myAppReady)
	// The app's status is computed from the reports the hub's status
	// writer holds, ahead of their Work status writes (docs/architecture.md,
	// the hub's stale caches), so the stored Work status may follow it by a
	// write.
	eventually(t, "the Work's stored status with the report of 3 ready replicas", 30*time.Second, func() error {
		work := &flotillav1.Work{}
		if err := f.hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.ClusterNamespace("member-1"), Name: flotillav1.WorkName("default", "web")}, work); err != nil {
			return err
		}
		if work.Status.ObservedGeneration != work.Generation || len(work.Status.Manifests) != 1 || work.Status.Manifests[0].Workload == nil || work.Status.Manifests[0].Workload.ReadyReplicas != 3 {
			return fmt.Errorf("Work generation %d, status %+v", work.Generation, work.Status)
		}
		return nil
	})

	outer := t // the restarted hub must outlive the subtest that starts it
	t.Run("hand edits are set back", func(t *testing.T) {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Replicas = ptr.To[int32](7)
		if err := f.members["member-1"].Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the hand-edited replicas set back to 3", 30*time.Second, func() error {
			d, err := f.deployment(ctx, "member-1", "default", "web")
			if err != nil {
				return err
			}
			if *d.Spec.Replicas != 3 {
				return fmt.Errorf("replicas %d", *d.Spec.Replicas)
			}
			if d.UID != original.UID {
				return fmt.Errorf("recreated")
			}
			return nil
		})
		// Let the transient scale settle: the member's Deployment back at
		// 3/3 on its latest generation, the Work reporting exactly that,
		// and the MyApp saying so.
		eventually(t, "the Work reporting the settled Deployment", 30*time.Second, func() error {
			d, err := f.deployment(ctx, "member-1", "default", "web")
			if err != nil {
				return err
			}
			if d.Status.ObservedGeneration != d.Generation || d.Status.Replicas != 3 || d.Status.ReadyReplicas != 3 {
				return fmt.Errorf("member Deployment generation %d observed %d replicas %d ready %d", d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.ReadyReplicas)
			}
			w := &flotillav1.Work{}
			if err := f.hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.ClusterNamespace("member-1"), Name: flotillav1.WorkName("default", "web")}, w); err != nil {
				return err
			}
			if len(w.Status.Manifests) != 1 || w.Status.Manifests[0].Workload == nil {
				return fmt.Errorf("Work status %+v", w.Status)
			}
			wl := w.Status.Manifests[0].Workload
			if wl.Generation != d.Generation || wl.Replicas != 3 || wl.ReadyReplicas != 3 {
				return fmt.Errorf("Work reports %+v, member generation %d", *wl, d.Generation)
			}
			return nil
		})
		// The MyApp may say 3 before it ever saw the transient 7 (its
		// status lags the Work's): only a status that holds is settled.
		eventuallyStable(t, "MyApp settling back to 3 ready replicas", 30*time.Second, 3*time.Second, myAppReady)
	})

	t.Run("an unowned Deployment is left alone and reported", func(t *testing.T) {
		mc := f.members["member-1"]
		theirs := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "legacy"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "legacy"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "legacy:1"}}},
				},
			},
		}
		if err := mc.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		legacy := newApp("legacy", 2, flotillav1.Placement{})
		if err := f.hub.Create(ctx, legacy); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the MyApp reporting the member's NotOwned message", 30*time.Second, func() error {
			got := &flotillav1.MyApp{}
			if err := f.hub.Get(ctx, client.ObjectKeyFromObject(legacy), got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionDegraded)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "member-1") || !strings.Contains(c.Message, "legacy") {
				return fmt.Errorf("Degraded %+v", c)
			}
			return nil
		})
		d, err := f.deployment(ctx, "member-1", "default", "legacy")
		if err != nil {
			t.Fatal(err)
		}
		if d.UID != theirs.UID || d.Generation != 1 || d.Spec.Template.Spec.Containers[0].Image != "legacy:1" || d.Labels[flotillav1.LabelWork] != "" {
			t.Fatalf("the unowned Deployment was touched: generation %d, image %s, labels %v", d.Generation, d.Spec.Template.Spec.Containers[0].Image, d.Labels)
		}
	})

	t.Run("with the hub gone the member keeps running, and status catches up", func(t *testing.T) {
		before, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		stopHub()
		// While the hub is away the member changes: its node is cordoned
		// and the pods deleted, so none is ready. The agent keeps the
		// Deployment and queues the status for when a hub returns.
		mc := f.members["member-1"]
		setUnschedulable := func(v bool) {
			t.Helper()
			var nodes corev1.NodeList
			if err := mc.List(ctx, &nodes); err != nil {
				t.Fatal(err)
			}
			for i := range nodes.Items {
				n := &nodes.Items[i]
				patch := client.MergeFrom(n.DeepCopy())
				n.Spec.Unschedulable = v
				if err := mc.Patch(ctx, n, patch); err != nil {
					t.Fatal(err)
				}
			}
		}
		setUnschedulable(true)
		if err := mc.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("default"), client.MatchingLabels{flotillav1.LabelMyAppName: "web"}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "member-1's Deployment losing its ready replicas", 30*time.Second, func() error {
			d, err := f.deployment(ctx, "member-1", "default", "web")
			if err != nil {
				return err
			}
			if d.Status.ReadyReplicas != 0 {
				return fmt.Errorf("readyReplicas %d", d.Status.ReadyReplicas)
			}
			return nil
		})
		time.Sleep(4 * time.Second) // longer than the hub's grace period
		during, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			t.Fatalf("the Deployment is gone while the hub is away: %v", err)
		}
		if during.UID != before.UID || during.Generation != before.Generation {
			t.Fatalf("the Deployment changed while the hub was away: uid %s->%s generation %d->%d", before.UID, during.UID, before.Generation, during.Generation)
		}
		// No hub runs, so the MyApp still shows the last status it had.
		if err := myAppReady(); err != nil {
			t.Fatalf("the MyApp status moved without a hub: %v", err)
		}
		// A hub comes back on the same address (a restarted hub).
		f.startSyncHub(outer, syncAddr)
		eventually(t, "the new hub's MyApp status showing 0 ready replicas", 60*time.Second, func() error {
			got := &flotillav1.MyApp{}
			if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
				return err
			}
			if got.Status.ReadyReplicas != 0 {
				return fmt.Errorf("readyReplicas %d", got.Status.ReadyReplicas)
			}
			return nil
		})
		setUnschedulable(false)
		eventually(t, "MyApp Ready again through the new hub", 60*time.Second, myAppReady)
		after, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		if after.UID != before.UID || after.Generation != before.Generation {
			t.Fatalf("the Deployment was re-created or re-applied after the hub returned: uid %s->%s generation %d->%d", before.UID, after.UID, before.Generation, after.Generation)
		}
	})

	t.Run("deleting the MyApp deletes the member's Deployment for good", func(t *testing.T) {
		if err := f.hub.Delete(ctx, app); err != nil {
			t.Fatal(err)
		}
		gone := func() error {
			_, err := f.deployment(ctx, "member-1", "default", "web")
			if err == nil {
				return fmt.Errorf("Deployment web still in member-1")
			}
			return client.IgnoreNotFound(err)
		}
		eventually(t, "Deployment web deleted from member-1", 30*time.Second, gone)
		// The agent must not apply the Work again when it sees its own
		// delete.
		consistently(t, "Deployment web staying deleted", 3*time.Second, gone)
	})
}
