package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

// TestWebhookRefusesDependenciesTheUserCannotRead runs the hub's webhook
// behind a real hub apiserver. alice may write MyApps in team-a and read
// Secret readable there, not Secret hidden. Her MyApp that names hidden
// (an env var) is refused, naming the field, alice and the Secret; one
// that names readable is admitted. An app an admin made with hidden can
// still be scaled by alice (she adds no dependency), but not changed to
// name another Secret she cannot read. bob, with the same rights in
// team-b, is not disturbed.
func TestWebhookRefusesDependenciesTheUserCannotRead(t *testing.T) {
	certDir := hubCerts(t)
	addr := freeAddr(t)
	env := newHubEnv(t, func(o *setup.Options) {
		o.CertDir = certDir
		o.WebhookAddr = addr
		o.RegisterWebhookURL = "https://" + addr
	})
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		if err := env.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"readable", "hidden", "hidden-2"} {
			if err := env.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"password": []byte(name)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	author := func(ns, user string) client.Client {
		t.Helper()
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "myapp-author"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"flotilla.dev"}, Resources: []string{"myapps"}, Verbs: []string{"get", "list", "create", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"readable"}},
		}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "myapp-author"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "myapp-author"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		for _, o := range []client.Object{role, binding} {
			if err := env.c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		cfg := rest.CopyConfig(env.cfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: env.c.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := author("team-a", "alice"), author("team-b", "bob")
	usingSecret := func(ns, name, secret string) *flotillav1.MyApp {
		a := tenantApp(ns, name, "")
		a.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
			Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "password"}}}}}}}}
		return a
	}
	refusal := func(err error, secret string) string {
		switch {
		case err == nil:
			return "admitted"
		case !apierrors.IsInvalid(err):
			return "refused, but not as Invalid: " + err.Error()
		}
		for _, s := range []string{"spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name", `alice may not get Secret "` + secret + `" in namespace team-a`} {
			if !strings.Contains(err.Error(), s) {
				return "the refusal does not name " + s + ": " + err.Error()
			}
		}
		return ""
	}

	// Until the webhook serves, the apiserver fails closed; the first
	// admitted app shows it does.
	eventually(t, "the webhook admitting alice's app that uses Secret readable", 30*time.Second, func() error {
		return client.IgnoreAlreadyExists(alice.Create(ctx, usingSecret("team-a", "ok", "readable")))
	})
	if msg := refusal(alice.Create(ctx, usingSecret("team-a", "sneaky", "hidden")), "hidden"); msg != "" {
		t.Errorf("alice's app naming Secret hidden: %s", msg)
	}
	if err := alice.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "sneaky"}, &flotillav1.MyApp{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused app exists: %v", err)
	}

	// An admin's app that uses hidden: alice may scale it, not point it at
	// another Secret she cannot read.
	admins := usingSecret("team-a", "admins", "hidden")
	if err := env.c.Create(ctx, admins); err != nil {
		t.Fatal(err)
	}
	// The hub controller writes the app too (finalizer, status), so each
	// of alice's updates is re-read and retried on a conflict: a conflict
	// says nothing about the webhook.
	updateAsAlice := func(change func(*flotillav1.MyApp)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			app := &flotillav1.MyApp{}
			if err := alice.Get(ctx, client.ObjectKeyFromObject(admins), app); err != nil {
				return err
			}
			change(app)
			return alice.Update(ctx, app)
		})
	}
	if err := updateAsAlice(func(app *flotillav1.MyApp) { app.Spec.Replicas = ptr.To[int32](3) }); err != nil {
		t.Errorf("alice scaling the admin's app, which names no new dependency: %v", err)
	}
	repoint := func(app *flotillav1.MyApp) {
		app.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name = "hidden-2"
	}
	if msg := refusal(updateAsAlice(repoint), "hidden-2"); msg != "" {
		t.Errorf("alice pointing the admin's app at Secret hidden-2: %s", msg)
	}

	// bob, in team-b, is not disturbed by alice's refusals.
	if err := bob.Create(ctx, usingSecret("team-b", "ok", "readable")); err != nil {
		t.Errorf("bob's app that uses Secret readable in team-b: %v", err)
	}
}
