package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

// makePush turns MemberCluster member into a Push member whose kubeconfig
// Secret (in the hub's flotilla-system) holds kubeconfig.
func (f *fleet) makePush(t *testing.T, member string, kubeconfig []byte) {
	t.Helper()
	ctx := context.Background()
	if err := f.hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flotillav1.SystemNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: "flotilla-push-" + member},
		Data:       map[string][]byte{flotillav1.DefaultKubeconfigKey: kubeconfig},
	}
	if err := f.hub.Create(ctx, secret); err != nil {
		t.Fatalf("creating the kubeconfig Secret of %s: %v", member, err)
	}
	mc := &flotillav1.MemberCluster{}
	if err := f.hub.Get(ctx, client.ObjectKey{Name: member}, mc); apierrors.IsNotFound(err) {
		mc = &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: member}}
		mc.Spec.SyncMode = flotillav1.SyncModePush
		mc.Spec.Push = &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: secret.Name}}
		if err := f.hub.Create(ctx, mc); err != nil {
			t.Fatalf("creating MemberCluster %s: %v", member, err)
		}
		return
	} else if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(mc.DeepCopy())
	mc.Spec.SyncMode = flotillav1.SyncModePush
	mc.Spec.Push = &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: secret.Name}}
	if err := f.hub.Patch(ctx, mc, patch); err != nil {
		t.Fatalf("switching %s to Push: %v", member, err)
	}
}

// waitConnected waits until member's Connected condition is True with
// reason.
func waitConnected(t *testing.T, c client.Client, member, reason string) {
	t.Helper()
	eventually(t, member+" Connected with reason "+reason, 30*time.Second, func() error {
		cond, err := memberCondition(c, member, flotillav1.ConditionConnected)
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionTrue || cond.Reason != reason {
			return fmt.Errorf("Connected %s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
		return nil
	})
}

func memberCondition(c client.Client, name, typ string) (*metav1.Condition, error) {
	mc := &flotillav1.MemberCluster{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
		return nil, err
	}
	cond := meta.FindStatusCondition(mc.Status.Conditions, typ)
	if cond == nil {
		return nil, fmt.Errorf("MemberCluster %s has no %s condition yet", name, typ)
	}
	return cond, nil
}

// TestPushMemberRunsWorksLikeAnAgent runs a mixed fleet: member-1 with an
// agent, member-2 in Push mode (no agent: the hub applies through its
// kubeconfig). A Duplicated MyApp runs in both and becomes Ready; member-2's
// Deployment carries Flotilla's labels and is recorded in the applied set
// in the member; a hand edit there is set back; an agent for member-2 is
// refused and changes nothing; a Push member with a bad Secret is Ready
// False with reason KubeconfigInvalid and disturbs no one; deleting the
// MyApp deletes member-2's Deployment and the Works go.
// startPullAndPush starts a fleet of two members, a hub (pushing every
// 500 ms), an agent for member-1 and member-2 in Push mode through its
// own kubeconfig, and waits for both Ready and member-2 Pushing. It
// returns the fleet and the hub's sync address.
func startPullAndPush(t *testing.T) (*fleet, string) {
	t.Helper()
	f := startFleet(t, 2)
	kubeconfig, err := os.ReadFile(f.tb.Members[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	f.makePush(t, "member-2", kubeconfig)
	syncAddr := freeAddr(t)
	f.startSyncHubWith(t, syncAddr, func(o *setup.Options) { o.PushHeartbeatInterval = 500 * time.Millisecond })
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1", "member-2")
	waitConnected(t, f.hub, "member-2", flotillav1.ReasonPushing)
	return f, syncAddr
}

func TestPushMemberRunsWorksLikeAnAgent(t *testing.T) {
	f, syncAddr := startPullAndPush(t)
	ctx := context.Background()

	app := newApp("web", 2, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}})
	app.Spec.Image = "nginx:1.27"
	// The Deployment knobs reach pull and push members alike.
	app.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	app.Spec.ProgressDeadlineSeconds = ptr.To[int32](120)
	app.Spec.RevisionHistoryLimit = ptr.To[int32](3)
	// A typed override reaches only the cluster it selects (a toleration:
	// harmless to the testbed's nodes, unlike a node selector).
	tol := corev1.Toleration{Key: "flotilla.test/push", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	// And a JSON patch reaches any field, only where its override selects.
	app.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "push-only", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-2"}},
		Tolerations: []corev1.Toleration{tol}}, {Name: "pull-only", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
		Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchAdd, Path: "/spec/template/spec/terminationGracePeriodSeconds", Value: &apiextensionsv1.JSON{Raw: []byte("7")}}}}}
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	var uid types.UID
	eventually(t, "Deployment web in both members", 60*time.Second, func() error {
		for _, m := range []string{"member-1", "member-2"} {
			d, err := f.deployment(ctx, m, "default", "web")
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || ptr.Deref(d.Spec.ProgressDeadlineSeconds, 0) != 120 || ptr.Deref(d.Spec.RevisionHistoryLimit, 0) != 3 {
				return fmt.Errorf("%s's Deployment has strategy %+v, progressDeadlineSeconds %v, revisionHistoryLimit %v; want Recreate, 120, 3",
					m, d.Spec.Strategy, d.Spec.ProgressDeadlineSeconds, d.Spec.RevisionHistoryLimit)
			}
			if got, want := slices.Contains(d.Spec.Template.Spec.Tolerations, tol), m == "member-2"; got != want {
				return fmt.Errorf("%s's Deployment has tolerations %v; the override selects member-2 only", m, d.Spec.Template.Spec.Tolerations)
			}
			// The member defaults the grace period to 30 where no patch sets it.
			if got, want := ptr.Deref(d.Spec.Template.Spec.TerminationGracePeriodSeconds, 0) == 7, m == "member-1"; got != want {
				return fmt.Errorf("%s's pods have terminationGracePeriodSeconds %v; the patch selects member-1 only", m, d.Spec.Template.Spec.TerminationGracePeriodSeconds)
			}
			if m == "member-2" {
				uid = d.UID
				if d.Labels[flotillav1.LabelFleet] == "" || d.Labels[flotillav1.LabelCluster] != "member-2" || d.Annotations[flotillav1.AnnotationWork] == "" {
					return fmt.Errorf("member-2's Deployment lacks Flotilla's identity: labels %v", d.Labels)
				}
			}
		}
		return nil
	})
	eventually(t, "MyApp web Ready with member-2's replicas ready", 90*time.Second, func() error {
		got := &flotillav1.MyApp{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready: %+v", c)
		}
		for _, cs := range got.Status.Clusters {
			if cs.Name == "member-2" && cs.ReadyReplicas == 2 {
				return nil
			}
		}
		return fmt.Errorf("member-2 not reported ready: %+v", got.Status.Clusters)
	})
	var records corev1.ConfigMapList
	if err := f.members["member-2"].List(ctx, &records, client.InNamespace(flotillav1.SystemNamespace), client.HasLabels{flotillav1.LabelAppliedSet}); err != nil {
		t.Fatal(err)
	}
	if len(records.Items) != 1 || !strings.Contains(records.Items[0].Data["objects"], string(uid)) {
		t.Fatalf("member-2's applied set does not record the Deployment %s: %+v", uid, records.Items)
	}

	// A hand edit in the push member is set back.
	d, err := f.deployment(ctx, "member-2", "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To[int32](5)
	if err := f.members["member-2"].Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	eventually(t, "member-2's hand edit set back", 30*time.Second, func() error {
		d, err := f.deployment(ctx, "member-2", "default", "web")
		if err != nil {
			return err
		}
		if *d.Spec.Replicas != 2 || d.UID != uid {
			return fmt.Errorf("replicas %d uid %s", *d.Spec.Replicas, d.UID)
		}
		return nil
	})

	// An agent for the Push member is refused: the hub keeps pushing.
	startAgent(t, f.agentOptions(t, "member-2", syncAddr))
	consistently(t, "member-2 pushed while its agent is refused", 3*time.Second, func() error {
		c, err := memberCondition(f.hub, "member-2", flotillav1.ConditionConnected)
		if err != nil {
			return err
		}
		if c.Reason != flotillav1.ReasonPushing {
			return fmt.Errorf("Connected %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})

	// A Push member whose Secret holds no kubeconfig: Ready False, named.
	bad := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: "push-bad-kubeconfig"},
		Data:       map[string][]byte{"kubeconfig": []byte("this is not a kubeconfig")},
	}
	if err := f.hub.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	badMC := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "push-bad"}}
	badMC.Spec.SyncMode = flotillav1.SyncModePush
	badMC.Spec.Push = &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: bad.Name}}
	if err := f.hub.Create(ctx, badMC); err != nil {
		t.Fatal(err)
	}
	eventually(t, "push-bad Ready False KubeconfigInvalid naming its Secret", 30*time.Second, func() error {
		c, err := memberCondition(f.hub, "push-bad", flotillav1.ConditionReady)
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != flotillav1.ReasonKubeconfigInvalid || !strings.Contains(c.Message, flotillav1.SystemNamespace+"/push-bad-kubeconfig") {
			return fmt.Errorf("Ready %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	// A kubeconfig the member refuses (a made-up token): named the same way.
	kubeconfig, err := os.ReadFile(f.tb.Members[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.ClientCertificateData, ai.ClientKeyData, ai.Token = nil, nil, "not-a-real-token"
	}
	refused, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.makePush(t, "push-refused", refused)
	eventually(t, "push-refused Ready False KubeconfigInvalid: credentials refused", 30*time.Second, func() error {
		c, err := memberCondition(f.hub, "push-refused", flotillav1.ConditionReady)
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != flotillav1.ReasonKubeconfigInvalid || !strings.Contains(c.Message, "refuses the kubeconfig's credentials") {
			return fmt.Errorf("Ready %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	waitReady(t, f.hub, "member-1", "member-2")
	if d, err := f.deployment(ctx, "member-2", "default", "web"); err != nil || d.UID != uid {
		t.Fatalf("member-2's Deployment changed: %v", err)
	}

	// Deleting the MyApp deletes member-2's Deployment, and the Works go.
	if err := f.hub.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "member-2's Deployment deleted and the Works gone", 60*time.Second, func() error {
		d, err := f.deployment(ctx, "member-2", "default", "web")
		if err == nil && d.DeletionTimestamp == nil {
			return fmt.Errorf("Deployment still there (uid %s)", d.UID)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		var ws flotillav1.WorkList
		if err := f.hub.List(ctx, &ws); err != nil {
			return err
		}
		if len(ws.Items) > 0 {
			return fmt.Errorf("%d Works left, e.g. %s/%s", len(ws.Items), ws.Items[0].Namespace, ws.Items[0].Name)
		}
		return nil
	})
	var left appsv1.DeploymentList
	if err := f.members["member-2"].List(ctx, &left, client.HasLabels{flotillav1.LabelWork}); err != nil {
		t.Fatal(err)
	}
	for _, d := range left.Items {
		if d.DeletionTimestamp == nil {
			t.Errorf("member-2 still runs Flotilla's Deployment %s/%s", d.Namespace, d.Name)
		}
	}
}

// TestSwitchingPullPushPullKeepsDeployments switches a member with a
// running agent to Push and back. Its Deployment keeps its UID throughout;
// while pushed, the refused agent stands down (an image change the hub
// pushes is not reverted by the agent's old copy of the Work), and back in
// Pull mode the agent applies again.
func TestSwitchingPullPushPullKeepsDeployments(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHubWith(t, syncAddr, func(o *setup.Options) { o.PushHeartbeatInterval = 500 * time.Millisecond })
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1")
	app, uid := f.createWeb(t)
	runs := func(image string) func() error {
		return func() error {
			d, err := f.deployment(ctx, "member-1", "default", "web")
			if err != nil {
				return err
			}
			if d.UID != uid {
				return fmt.Errorf("the Deployment was replaced: uid %s, was %s", d.UID, uid)
			}
			if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
				return fmt.Errorf("image %s, want %s", got, image)
			}
			return nil
		}
	}

	kubeconfig, err := os.ReadFile(f.tb.Members[0].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	f.makePush(t, "member-1", kubeconfig)
	waitConnected(t, f.hub, "member-1", flotillav1.ReasonPushing)
	updateMyApp(t, f.hub, app, setImage("nginx:1.28"))
	eventually(t, "the pushed image in member-1", 30*time.Second, runs("nginx:1.28"))
	consistently(t, "the pushed image stays (the refused agent stood down)", 3*time.Second, runs("nginx:1.28"))

	mc := &flotillav1.MemberCluster{}
	if err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, mc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(mc.DeepCopy())
	mc.Spec.SyncMode = flotillav1.SyncModePull
	if err := f.hub.Patch(ctx, mc, patch); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, f.hub, "member-1", flotillav1.ReasonStreamOpen)
	updateMyApp(t, f.hub, app, setImage("nginx:1.29"))
	eventually(t, "the agent's image in member-1", 30*time.Second, runs("nginx:1.29"))
	waitReady(t, f.hub, "member-1")
}

// TestNewHubResumesPushWithoutReapplying restarts the hub (a new leader)
// with a Push member running a Work: the new hub engages the member,
// finds from the applied-set record that nothing changed or drifted, and
// applies nothing (flotilla_push_applies_total stays absent), while the
// Work stays Applied and the Deployment keeps its UID. A Work changed
// afterwards is applied once.
func TestNewHubResumesPushWithoutReapplying(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	kubeconfig, err := os.ReadFile(f.tb.Members[0].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	f.makePush(t, "member-1", kubeconfig)
	first := prometheus.NewRegistry()
	_, stop := f.startSyncHubWith(t, freeAddr(t), func(o *setup.Options) {
		o.PushHeartbeatInterval = 500 * time.Millisecond
		o.Registerer = first
	})
	waitReady(t, f.hub, "member-1")
	app := newApp("web", 1, flotillav1.Placement{})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	var uid types.UID
	eventually(t, "Deployment web in member-1, its Work Applied", 60*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			return err
		}
		uid = d.UID
		return workApplied(f.hub, "member-1")
	})
	if n := metricValue(t, first, "flotilla_push_applies_total", "member-1"); n < 1 {
		t.Fatalf("the first hub counted %v applies to member-1, want at least 1", n)
	}
	stop()

	second := prometheus.NewRegistry()
	f.startSyncHubWith(t, freeAddr(t), func(o *setup.Options) {
		o.PushHeartbeatInterval = 500 * time.Millisecond
		o.Registerer = second
	})
	// The condition may still be the first hub's: wait for the new hub's
	// own word that it reached and synced the member.
	eventually(t, "the new hub up on member-1 (flotilla_push_member_up 1)", 30*time.Second, func() error {
		if v := metricValue(t, second, "flotilla_push_member_up", "member-1"); v != 1 {
			return fmt.Errorf("flotilla_push_member_up = %v", v)
		}
		return nil
	})
	consistently(t, "the new hub applies nothing unchanged", 3*time.Second, func() error {
		if n := metricValue(t, second, "flotilla_push_applies_total", "member-1"); n != 0 {
			return fmt.Errorf("%v applies to member-1", n)
		}
		if err := workApplied(f.hub, "member-1"); err != nil {
			return err
		}
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			return err
		}
		if d.UID != uid {
			return fmt.Errorf("the Deployment was replaced: uid %s, was %s", d.UID, uid)
		}
		return nil
	})

	updateMyApp(t, f.hub, app, setImage("nginx:1.28"))
	eventually(t, "the new image applied by the new hub", 30*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			return err
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != "nginx:1.28" {
			return fmt.Errorf("image %s", got)
		}
		if n := metricValue(t, second, "flotilla_push_applies_total", "member-1"); n != 1 {
			return fmt.Errorf("%v applies to member-1, want 1", n)
		}
		return nil
	})
}

// workApplied says whether every Work of member reports Applied True.
func workApplied(c client.Client, member string) error {
	var ws flotillav1.WorkList
	if err := c.List(context.Background(), &ws, client.InNamespace(flotillav1.ClusterNamespace(member))); err != nil {
		return err
	}
	if len(ws.Items) == 0 {
		return fmt.Errorf("no Work for %s", member)
	}
	for _, w := range ws.Items {
		if c := meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionApplied); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Work %s Applied: %+v", w.Name, c)
		}
	}
	return nil
}

// metricValue sums the series of the metric name in reg whose cluster
// label is cluster (a counter's or a gauge's value); 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name, cluster string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}
