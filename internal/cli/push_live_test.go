package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// TestPushJoinLifecycle joins a bare testbed member (with a real token
// controller) to a real hub apiserver in push mode, as a user runs the
// commands: a dry run and bad input change nothing; a join creates the
// member's push identity, the hub's kubeconfig Secret and a Push
// MemberCluster, and a second join changes nothing; the kubeconfig's
// identity may run Deployments in a tenant namespace but not read Secrets
// (negative checks with real requests); a changed Secret is replaced only
// with --overwrite; a Pull MemberCluster is switched to Push keeping its
// other fields; unjoin removes what push join made and nothing else. The
// hub's push engine is not run: the MemberCluster's readiness is its job.
func TestPushJoinLifecycle(t *testing.T) {
	hub := hubEnv.client(t)
	tbm := pushMemberBed.member(t)
	memberCfg, err := tbm.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	member, err := NewClient(memberCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flotillav1.SystemNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	hubKC, memberKC := hubEnv.kubeconfig(t), tbm.Kubeconfig
	join := func(name string, extra ...string) (string, error) {
		args := append([]string{"--kubeconfig", memberKC, "join", "--mode", "push", "--cluster-name", name,
			"--hub-kubeconfig", hubKC, "--timeout", "60s"}, extra...)
		return run(t, args...)
	}
	assertNoPushIdentity := func(when string) {
		t.Helper()
		for _, o := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: PushServiceAccountName}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: PushTokenSecretName}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: PushBindingName}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: PushBindingName}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: AgentRoleName}},
		} {
			if err := member.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				t.Errorf("%s: %T %s in the member: %v, want NotFound", when, o, objectName(o), err)
			}
		}
	}

	// A dry run and refused input create nothing on either side.
	out, err := join("push-1", "--labels", "env=test", "--region", "eu", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Dry run: nothing is changed") || !strings.Contains(out, "create MemberCluster push-1") || !strings.Contains(out, tbm.Host()) {
		t.Errorf("dry run printed:\n%s", out)
	}
	if _, err := join("push-1", "--labels", "flotilla.dev/fleet=x"); err == nil || !strings.Contains(err.Error(), "--labels") {
		t.Errorf("join with a label in the hub's domain: %v, want an error naming --labels", err)
	}
	if _, err := join("push-1", "--member-server", "http://"+strings.TrimPrefix(tbm.Host(), "https://")); err == nil || !strings.Contains(err.Error(), "--member-server") {
		t.Errorf("join with a clear-text member server: %v, want an error naming --member-server", err)
	}
	assertNoPushIdentity("after a dry run and refused joins")
	if err := hub.Get(ctx, client.ObjectKey{Name: "push-1"}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("MemberCluster push-1 after a dry run: %v, want NotFound", err)
	}

	// The join.
	out, err = join("push-1", "--labels", "env=test", "--region", "eu", "--zone", "eu-1", "--provider", "kwok")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{"created MemberCluster push-1", "created Secret flotilla-system/flotilla-push-push-1", "kubectl flotilla status"} {
		if !strings.Contains(out, w) {
			t.Errorf("join printed\n%s\nwithout %q", out, w)
		}
	}
	mc := &flotillav1.MemberCluster{}
	if err := hub.Get(ctx, client.ObjectKey{Name: "push-1"}, mc); err != nil {
		t.Fatal(err)
	}
	if !mc.IsPush() || mc.Spec.Push == nil || mc.Spec.Push.KubeconfigSecretRef.Name != "flotilla-push-push-1" || mc.Spec.Push.KubeconfigSecretRef.Key != flotillav1.DefaultKubeconfigKey ||
		mc.Spec.Region != "eu" || mc.Spec.Zone != "eu-1" || mc.Spec.Provider != "kwok" || mc.Labels["env"] != "test" {
		t.Errorf("MemberCluster push-1: labels %v, spec %+v", mc.Labels, mc.Spec)
	}
	secret := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: "flotilla-push-push-1"}, secret); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(secret.Data[flotillav1.DefaultKubeconfigKey])
	if err != nil {
		t.Fatalf("the hub Secret's kubeconfig: %v", err)
	}
	kctx := kc.Contexts[kc.CurrentContext]
	memberCA, err := os.ReadFile(memberCfg.CAFile)
	if len(memberCfg.CAData) > 0 {
		memberCA, err = memberCfg.CAData, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if kctx == nil || kc.Clusters[kctx.Cluster].Server != tbm.Host() || !bytes.Equal(bytes.TrimSpace(kc.Clusters[kctx.Cluster].CertificateAuthorityData), bytes.TrimSpace(memberCA)) || kc.AuthInfos[kctx.AuthInfo].Token == "" {
		t.Errorf("the hub Secret's kubeconfig does not name the member's server %s, its CA and a token:\n%s", tbm.Host(), secret.Data[flotillav1.DefaultKubeconfigKey])
	}
	tokenSecret := &corev1.Secret{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: PushTokenSecretName}, tokenSecret); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: PushServiceAccountName}, sa); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	if err := member.Get(ctx, client.ObjectKey{Name: flotillav1.SystemNamespace}, ns); err != nil || ns.Labels[LabelJoinCreated] != "true" {
		t.Errorf("namespace %s in the member: %v, labels %v: join created it but did not say so", flotillav1.SystemNamespace, err, ns.Labels)
	}

	// Again: nothing changes, the token is the same.
	out, err = join("push-1", "--labels", "env=test", "--region", "eu", "--zone", "eu-1", "--provider", "kwok")
	if err != nil {
		t.Fatalf("second join: %v\n%s", err, out)
	}
	for _, o := range []client.Object{mc.DeepCopy(), secret.DeepCopy()} {
		before := o.GetResourceVersion()
		if err := hub.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		if o.GetResourceVersion() != before {
			t.Errorf("the second join changed %T %s on the hub", o, o.GetName())
		}
	}
	for _, o := range []client.Object{tokenSecret.DeepCopy(), sa.DeepCopy()} {
		before := o.GetResourceVersion()
		if err := member.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		if o.GetResourceVersion() != before {
			t.Errorf("the second join changed %T %s in the member", o, o.GetName())
		}
	}

	// The identity, with the kubeconfig the hub got: Deployments in a
	// tenant namespace yes; Secrets no, not in kube-system, not even its
	// own token.
	pushCfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[flotillav1.DefaultKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	pushClient, err := NewClient(pushCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := pushClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}}); err != nil {
		t.Fatalf("the push identity creating a tenant namespace: %v", err)
	}
	workload := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
		},
	}
	if err := pushClient.Create(ctx, workload); err != nil {
		t.Errorf("the push identity creating a Deployment in tenant-a: %v", err)
	}
	// The agent's RBAC, not more: Secrets are readable (a MyApp's
	// dependencies), but no pods, PersistentVolumeClaims or RBAC objects.
	if err := pushClient.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "direct"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}); !apierrors.IsForbidden(err) {
		t.Errorf("the push identity creating a Pod in tenant-a: %v, want Forbidden", err)
	}
	if err := pushClient.List(ctx, &corev1.PersistentVolumeClaimList{}, client.InNamespace("kube-system")); !apierrors.IsForbidden(err) {
		t.Errorf("the push identity listing PersistentVolumeClaims in kube-system: %v, want Forbidden", err)
	}
	if err := pushClient.List(ctx, &rbacv1.RoleBindingList{}, client.InNamespace("kube-system")); !apierrors.IsForbidden(err) {
		t.Errorf("the push identity listing RoleBindings in kube-system: %v, want Forbidden", err)
	}

	// The preflight names what an identity without the agent's RBAC
	// lacks, and a member that does not answer.
	nobodyKC, err := tbm.ServiceAccountKubeconfig(ctx, "default", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(nobodyKC)
	if err != nil {
		t.Fatal(err)
	}
	if err := PushPreflight(ctx, raw, flotillav1.SystemNamespace); err == nil || !strings.Contains(err.Error(), "may not create deployments.apps in every namespace") {
		t.Errorf("preflight of an identity without RBAC: %v, want an error naming the Deployments right", err)
	}
	gone, err := PushKubeconfig("x", "https://127.0.0.1:1", memberCA, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if err := PushPreflight(ctx, gone, flotillav1.SystemNamespace); err == nil || !strings.Contains(err.Error(), "does not answer /readyz") {
		t.Errorf("preflight of a member that is not there: %v, want /readyz named", err)
	}

	// A hub Secret that holds another kubeconfig is replaced only with
	// --overwrite (a token rotation).
	secret.Data[flotillav1.DefaultKubeconfigKey] = []byte("apiVersion: v1\nkind: Config\n")
	if err := hub.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := join("push-1", "--labels", "env=test", "--region", "eu", "--zone", "eu-1", "--provider", "kwok"); err == nil || !strings.Contains(err.Error(), "--overwrite") || !strings.Contains(err.Error(), "flotilla-system/flotilla-push-push-1") {
		t.Errorf("join over a changed Secret: %v, want a refusal naming the Secret and --overwrite", err)
	}
	if out, err := join("push-1", "--labels", "env=test", "--region", "eu", "--zone", "eu-1", "--provider", "kwok", "--overwrite"); err != nil {
		t.Fatalf("join --overwrite: %v\n%s", err, out)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	if _, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[flotillav1.DefaultKubeconfigKey]); err != nil || !strings.Contains(string(secret.Data[flotillav1.DefaultKubeconfigKey]), tbm.Host()) {
		t.Errorf("the Secret after --overwrite: %v\n%s", err, secret.Data[flotillav1.DefaultKubeconfigKey])
	}

	// --rotate-token: a new token on the hub, and the old one refused by
	// the member from then on.
	oldToken := string(tokenSecret.Data[corev1.ServiceAccountTokenKey])
	if out, err := join("push-1", "--labels", "env=test", "--region", "eu", "--zone", "eu-1", "--provider", "kwok", "--rotate-token"); err != nil {
		t.Fatalf("join --rotate-token: %v\n%s", err, out)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(secret.Data[flotillav1.DefaultKubeconfigKey]), oldToken) {
		t.Error("the hub's kubeconfig still holds the old token after --rotate-token")
	}
	oldCfg := rest.CopyConfig(pushCfg)
	oldCfg.BearerToken = oldToken
	oldClient, err := NewClient(oldCfg)
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver caches a token's success for up to 10 s.
	testutil.Eventually(t, "the member refusing the old token after --rotate-token", 60*time.Second, func() error {
		if err := oldClient.Get(ctx, client.ObjectKeyFromObject(workload), &appsv1.Deployment{}); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("reading the workload with the old token: %v, want Unauthorized", err)
		}
		return nil
	})
	if pushCfg, err = clientcmd.RESTConfigFromKubeConfig(secret.Data[flotillav1.DefaultKubeconfigKey]); err != nil {
		t.Fatal(err)
	}
	if pushClient, err = NewClient(pushCfg); err != nil {
		t.Fatal(err)
	}
	if err := pushClient.Get(ctx, client.ObjectKeyFromObject(workload), &appsv1.Deployment{}); err != nil {
		t.Errorf("the new token reading the workload: %v", err)
	}

	// A Pull member switches to Push; what join does not set is kept.
	pull := &flotillav1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pull-1", Labels: map[string]string{"keep": "me"}},
		Spec: flotillav1.MemberClusterSpec{Region: "us", SyncMode: flotillav1.SyncModePull, DeletionPolicy: flotillav1.DeletionPolicyDelete,
			Taints: []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if err := hub.Create(ctx, pull); err != nil {
		t.Fatal(err)
	}
	out, err = join("pull-1", "--dry-run")
	if err != nil || !strings.Contains(out, "switch MemberCluster pull-1 from Pull to Push") {
		t.Errorf("dry run of a switch: %v\n%s", err, out)
	}
	out, err = join("pull-1")
	if err != nil {
		t.Fatalf("switching pull-1: %v\n%s", err, out)
	}
	for _, w := range []string{"switched MemberCluster pull-1 from Pull to Push", "refuses its agent's streams", "delete deployment/flotilla-agent"} {
		if !strings.Contains(out, w) {
			t.Errorf("the switch printed\n%s\nwithout %q", out, w)
		}
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(pull), pull); err != nil {
		t.Fatal(err)
	}
	if !pull.IsPush() || pull.Spec.Push == nil || pull.Spec.Push.KubeconfigSecretRef.Name != "flotilla-push-pull-1" ||
		pull.Spec.Region != "us" || pull.Labels["keep"] != "me" || len(pull.Spec.Taints) != 1 || pull.Spec.DeletionPolicy != "Delete" {
		t.Errorf("pull-1 after the switch: labels %v, spec %+v; want Push with everything else kept", pull.Labels, pull.Spec)
	}

	// A push member whose Secret an admin made: unjoin leaves the Secret.
	byHand := pushMember("by-hand", "my-kubeconfig", "")
	if err := hub.Create(ctx, byHand); err != nil {
		t.Fatal(err)
	}
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: "my-kubeconfig"}}
	if err := hub.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "--kubeconfig", hubKC, "unjoin", "by-hand", "--timeout", "30s"); err != nil || !strings.Contains(out, "not made by join") {
		t.Errorf("unjoin by-hand: %v\n%s", err, out)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(mine), mine); err != nil {
		t.Errorf("an admin's kubeconfig Secret after unjoin: %v, want it kept", err)
	}

	// unjoin of pull-1 without the member: the hub side only.
	out, err = run(t, "--kubeconfig", hubKC, "unjoin", "pull-1", "--timeout", "30s")
	if err != nil {
		t.Fatalf("unjoin pull-1: %v\n%s", err, out)
	}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: "flotilla-push-pull-1"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("pull-1's push Secret after unjoin: %v, want NotFound", err)
	}
	if !strings.Contains(out, "run unjoin again with --member-context") {
		t.Errorf("unjoin without the member printed\n%s\nwithout the hint", out)
	}

	// unjoin of push-1 with the member: everything push join made goes,
	// the workload stays (the deletion policy's business).
	out, err = run(t, "--kubeconfig", hubKC, "unjoin", "push-1", "--member-kubeconfig", memberKC, "--timeout", "30s")
	if err != nil {
		t.Fatalf("unjoin push-1: %v\n%s", err, out)
	}
	if err := hub.Get(ctx, client.ObjectKey{Name: "push-1"}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("MemberCluster push-1 after unjoin: %v, want NotFound", err)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("push-1's Secret after unjoin: %v, want NotFound", err)
	}
	assertNoPushIdentity("after unjoin")
	if err := member.Get(ctx, client.ObjectKey{Name: flotillav1.SystemNamespace}, ns); err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace %s, created by join, is still in the member after unjoin", ns.Name)
	}
	if err := member.Get(ctx, client.ObjectKeyFromObject(workload), &appsv1.Deployment{}); err != nil {
		t.Errorf("the workload after unjoin: %v (unjoin must leave workloads to the deletion policy)", err)
	}
}
