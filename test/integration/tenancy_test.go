package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

// tenantApp is a MyApp in hub namespace ns that places into target
// (empty: its own namespace) on every member.
func tenantApp(ns, name, target string) *flotillav1.MyApp {
	a := newApp(name, 1, flotillav1.Placement{})
	a.Namespace = ns
	a.Spec.TargetNamespace = target
	return a
}

// worksOf returns app's Works by cluster.
func worksOf(c client.Client, app *flotillav1.MyApp) (map[string]*flotillav1.Work, error) {
	var list flotillav1.WorkList
	if err := c.List(context.Background(), &list, client.MatchingLabels{
		flotillav1.LabelMyAppNamespace: app.Namespace, flotillav1.LabelMyAppName: app.Name,
	}); err != nil {
		return nil, err
	}
	out := map[string]*flotillav1.Work{}
	for i := range list.Items {
		out[list.Items[i].Labels[flotillav1.LabelCluster]] = &list.Items[i]
	}
	return out, nil
}

// wantWorks checks that app has a Work in exactly clusters, each with a
// Deployment in namespace target and image image.
func wantWorks(c client.Client, app *flotillav1.MyApp, target, image string, clusters ...string) error {
	deps, err := workDeployments(c, app)
	if err != nil {
		return err
	}
	if len(deps) != len(clusters) {
		return fmt.Errorf("%s/%s has Works in %d clusters, want %v", app.Namespace, app.Name, len(deps), clusters)
	}
	for _, cl := range clusters {
		d := deps[cl]
		if d == nil {
			return fmt.Errorf("%s/%s has no Work in %s", app.Namespace, app.Name, cl)
		}
		if d.Namespace != target || d.Spec.Template.Spec.Containers[0].Image != image {
			return fmt.Errorf("%s/%s's Work in %s carries a Deployment in %q running %s, want %q running %s",
				app.Namespace, app.Name, cl, d.Namespace, d.Spec.Template.Spec.Containers[0].Image, target, image)
		}
	}
	return nil
}

// refusedNaming checks that err is an admission refusal that names
// spec.targetNamespace, the value and each of details.
func refusedNaming(err error, target string, details ...string) error {
	if err == nil {
		return fmt.Errorf("a MyApp placing into %q was admitted", target)
	}
	if !apierrors.IsInvalid(err) {
		return fmt.Errorf("refused, but not as Invalid: %w", err)
	}
	for _, s := range append([]string{"spec.targetNamespace", `"` + target + `"`}, details...) {
		if !strings.Contains(err.Error(), s) {
			return fmt.Errorf("the refusal does not name %q: %w", s, err)
		}
	}
	return nil
}

// TestTenantsStayInTheirNamespaces runs the hub with its webhook against a
// real hub apiserver and two tenants, team-a and team-b, on two members:
// team-a cannot place into kube-system or team-b's namespace, nor into
// shared-x until a FleetNamespacePolicy grants shared-* (with a Pod
// Security level the Works carry); refusals leave team-b's app alone. Then
// the grant is withdrawn: the webhook refuses spec changes, the controller
// writes no new or updated Work into shared-x (also when the webhook is
// bypassed, and when a new member joins), says so in the MyApp's status
// and deletes none of the existing Works, while team-b's app goes on; and
// the held MyApp can still be deleted.
func TestTenantsStayInTheirNamespaces(t *testing.T) {
	certDir := hubCerts(t)
	addr := freeAddr(t)
	env := newHubEnv(t, func(o *setup.Options) {
		o.CertDir = certDir
		o.WebhookAddr = addr
		o.RegisterWebhookURL = "https://" + addr
	})
	ctx := context.Background()
	hb := startHeartbeats(t, env.hub.Tracker)
	createMembers(t, env.c, "member-1", "member-2")
	hb.connect("member-1", nil)
	hb.connect("member-2", nil)
	waitReady(t, env.c, "member-1", "member-2")
	for _, ns := range []string{"team-a", "team-b"} {
		if err := env.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// team-b's app in its own namespace: admitted once the webhook serves
	// (until then the apiserver fails closed), and reconciled throughout.
	other := tenantApp("team-b", "api", "")
	eventually(t, "the webhook admitting team-b's app in its own namespace", 30*time.Second, func() error {
		return client.IgnoreAlreadyExists(env.c.Create(ctx, other.DeepCopy()))
	})

	t.Run("without a policy, kube-system and another tenant's namespace are refused", func(t *testing.T) {
		for _, target := range []string{"kube-system", "team-b"} {
			err := env.c.Create(ctx, tenantApp("team-a", "web-"+target, target))
			if err := refusedNaming(err, target, `hub namespace "team-a"`, `no FleetNamespacePolicy matches hub namespace "team-a"`); err != nil {
				t.Error(err)
			}
		}
		if err := refusedNaming(env.c.Create(ctx, tenantApp("team-a", "web", "shared-x")), "shared-x"); err != nil {
			t.Error(err)
		}
	})

	policy := &flotillav1.FleetNamespacePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a-shared"},
		Spec: flotillav1.FleetNamespacePolicySpec{HubNamespaces: []string{"team-a"}, MemberNamespaces: []string{"shared-*"},
			PodSecurity: flotillav1.PodSecurityRestricted},
	}
	if err := env.c.Create(ctx, policy); err != nil {
		t.Fatalf("creating the FleetNamespacePolicy: %v", err)
	}
	app := tenantApp("team-a", "web", "shared-x")
	// The webhook reads policies from the hub's cache, which sees the new
	// one shortly after it is written.
	eventually(t, "the webhook admitting team-a's app into shared-x under the grant", 20*time.Second, func() error {
		return client.IgnoreAlreadyExists(env.c.Create(ctx, app.DeepCopy()))
	})

	t.Run("with the grant, kube-system is still refused and names the policy", func(t *testing.T) {
		err := env.c.Create(ctx, tenantApp("team-a", "sys", "kube-system"))
		if err := refusedNaming(err, "kube-system", "team-a-shared grants shared-*"); err != nil {
			t.Error(err)
		}
	})

	image := app.Spec.Image
	eventually(t, "team-a's Works into shared-x, and team-b's", 30*time.Second, func() error {
		if err := wantWorks(env.c, app, "shared-x", image, "member-1", "member-2"); err != nil {
			return err
		}
		return wantWorks(env.c, other, "team-b", image, "member-1", "member-2")
	})
	works, err := worksOf(env.c, app)
	if err != nil {
		t.Fatal(err)
	}
	for cl, w := range works {
		if w.Spec.PodSecurity != flotillav1.PodSecurityRestricted {
			t.Errorf("team-a's Work in %s has podSecurity %q, want the policy's restricted", cl, w.Spec.PodSecurity)
		}
	}
	uids := map[string]string{}
	for cl, w := range works {
		uids[cl] = string(w.UID)
	}

	// The grant is withdrawn.
	if err := env.c.Delete(ctx, policy); err != nil {
		t.Fatal(err)
	}
	eventually(t, "team-a's app reporting NamespaceNotAllowed", 20*time.Second, func() error {
		got := &flotillav1.MyApp{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionScheduled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != flotillav1.ReasonNamespaceNotAllowed {
			return fmt.Errorf("Scheduled = %+v", c)
		}
		for _, s := range []string{`spec.targetNamespace "shared-x" is not allowed`, `no FleetNamespacePolicy matches hub namespace "team-a"`} {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("Scheduled's message %q does not contain %q", c.Message, s)
			}
		}
		if r := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionReady); r == nil || r.Reason != flotillav1.ReasonNamespaceNotAllowed {
			return fmt.Errorf("Ready = %+v, want reason %s", r, flotillav1.ReasonNamespaceNotAllowed)
		}
		return nil
	})

	t.Run("the webhook refuses a spec change but admits a metadata-only update", func(t *testing.T) {
		// The hub writes the app's status too; a conflict says nothing
		// about the webhook, so each update is re-read and retried on one.
		update := func(change func(*flotillav1.MyApp)) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				got := &flotillav1.MyApp{}
				if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
					return err
				}
				change(got)
				return env.c.Update(ctx, got)
			})
		}
		if err := refusedNaming(update(func(a *flotillav1.MyApp) { a.Spec.Image = "registry.example.com/team/web:2.0" }), "shared-x", `no FleetNamespacePolicy matches hub namespace "team-a"`); err != nil {
			t.Error(err)
		}
		if err := update(func(a *flotillav1.MyApp) { a.Labels = map[string]string{"owner": "team-a"} }); err != nil {
			t.Errorf("a label-only update of the held app was refused: %v", err)
		}
	})

	t.Run("bypassing the webhook, a spec change writes no Work into shared-x", func(t *testing.T) {
		// As if the webhook were down with failurePolicy Ignore, or a
		// second path to the apiserver skipped it.
		if err := env.c.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-hub"}}); err != nil {
			t.Fatalf("removing the validating webhook: %v", err)
		}
		eventually(t, "a spec change of the held app admitted without the webhook", 20*time.Second, func() error {
			got := &flotillav1.MyApp{}
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
				return err
			}
			got.Spec.Image = "registry.example.com/team/web:2.0"
			return env.c.Update(ctx, got)
		})
		// A new member joins: team-b's app spreads to it, team-a's does
		// not, and team-a's Works keep the old image.
		createMembers(t, env.c, "member-3")
		hb.connect("member-3", nil)
		eventually(t, "team-b's app on the new member", 30*time.Second, func() error {
			return wantWorks(env.c, other, "team-b", image, "member-1", "member-2", "member-3")
		})
		consistently(t, "team-a's Works held as they were", 3*time.Second, func() error {
			return wantWorks(env.c, app, "shared-x", image, "member-1", "member-2")
		})
		works, err := worksOf(env.c, app)
		if err != nil {
			t.Fatal(err)
		}
		for cl, w := range works {
			if string(w.UID) != uids[cl] || !w.DeletionTimestamp.IsZero() {
				t.Errorf("team-a's Work in %s was replaced or is being deleted", cl)
			}
		}
		got := &flotillav1.MyApp{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionScheduled); c == nil || c.Reason != flotillav1.ReasonNamespaceNotAllowed {
			t.Errorf("Scheduled = %+v after the bypassed update, want %s", c, flotillav1.ReasonNamespaceNotAllowed)
		}
	})

	t.Run("the held app can still be deleted, and its Works go with it", func(t *testing.T) {
		if err := env.c.Delete(ctx, app); err != nil {
			t.Fatalf("deleting the held app: %v", err)
		}
		eventually(t, "team-a's app and Works gone", 30*time.Second, func() error {
			err := env.c.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{})
			if !apierrors.IsNotFound(err) {
				return errors.Join(errors.New("the MyApp is still there"), err)
			}
			works, err := worksOf(env.c, app)
			if err != nil {
				return err
			}
			if len(works) > 0 {
				return fmt.Errorf("%d Works left", len(works))
			}
			return nil
		})
		if err := wantWorks(env.c, other, "team-b", image, "member-1", "member-2", "member-3"); err != nil {
			t.Errorf("team-b's app after team-a's deletion: %v", err)
		}
	})
}
