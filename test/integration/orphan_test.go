package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestWorksVanishingWithoutIntentAreOrphaned runs a real hub and agent:
// a Work deleted by hand (without the deletion-intent mark) leaves its
// member Deployment running with the same UID, both for a Work made by
// hand and for a MyApp's Work (which the MyApp controller writes again,
// adopting the same Deployment); deleting the MyApp, which marks its Works,
// deletes its Deployments; and deleting the Work CRD on the hub, which
// makes every Work vanish at once, deletes no member Deployment.
func TestWorksVanishingWithoutIntentAreOrphaned(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1")
	member := f.members["member-1"]
	ns := flotillav1.ClusterNamespace("member-1")

	for _, name := range []string{"web", "api"} {
		app := newApp(name, 1, flotillav1.Placement{})
		app.Spec.Image = "nginx:1.27"
		if err := f.hub.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
	}
	handmade := handWork(t, ns, flotillav1.WorkName("default", "handmade"), "handmade")
	if err := f.hub.Create(ctx, handmade); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	eventually(t, "Deployments web, api and handmade in member-1", 60*time.Second, func() error {
		for _, name := range []string{"web", "api", "handmade"} {
			d, err := f.deployment(ctx, "member-1", "default", name)
			if err != nil {
				return err
			}
			uids[name] = d.UID
		}
		return nil
	})
	same := func(names ...string) func() error {
		return func() error {
			for _, name := range names {
				d, err := f.deployment(ctx, "member-1", "default", name)
				if err != nil {
					return fmt.Errorf("Deployment %s: %w", name, err)
				}
				if d.UID != uids[name] || d.DeletionTimestamp != nil {
					return fmt.Errorf("Deployment %s was deleted or replaced (uid %s, was %s)", name, d.UID, uids[name])
				}
			}
			return nil
		}
	}

	// A hand kubectl delete work: nothing marked it, so the agent
	// orphans the Deployment instead of deleting it.
	if err := f.hub.Delete(ctx, handmade); err != nil {
		t.Fatal(err)
	}
	web := &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: flotillav1.WorkName("default", "web")}}
	if err := f.hub.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the MyApp controller writing Work web again", 30*time.Second, func() error {
		got := &flotillav1.Work{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(web), got); err != nil {
			return err
		}
		if got.UID == web.UID {
			return fmt.Errorf("still the old Work")
		}
		return nil
	})
	consistently(t, "hand-deleted Works' Deployments running, same UIDs", 8*time.Second, same("web", "api", "handmade"))

	// Deleting a MyApp marks its Works: its Deployment goes.
	if err := f.hub.Delete(ctx, &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Deployment api deleted from member-1", 60*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "api")
		if apierrors.IsNotFound(err) || (err == nil && d.DeletionTimestamp != nil) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (uid %s)", d.UID)
	})
	if err := same("web", "handmade")(); err != nil {
		t.Fatal(err)
	}

	// Deleting the Work CRD (kubectl delete -k deploy/hub does) makes
	// every Work vanish at once: no member Deployment is deleted.
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "works.flotilla.dev"}}
	crdClient, err := client.New(f.hubCfg, client.Options{Scheme: apiextensionsScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := crdClient.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Work CRD gone", 60*time.Second, func() error {
		err := crdClient.Get(ctx, client.ObjectKeyFromObject(crd), crd)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	consistently(t, "every member Deployment running after the Work CRD is deleted", 10*time.Second, func() error {
		list := &appsv1.DeploymentList{}
		if err := member.List(ctx, list, client.InNamespace("default")); err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d Deployments in member-1, want web and handmade", len(list.Items))
		}
		return same("web", "handmade")()
	})
}

// handWork is a Work made by hand in namespace ns holding one Deployment
// called deployment, as a person would kubectl apply it.
func handWork(t *testing.T, ns, name, deployment string) *flotillav1.Work {
	t.Helper()
	raw := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":"default"},`+
		`"spec":{"replicas":1,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q}},`+
		`"spec":{"containers":[{"name":"app","image":"nginx:1.27"}]}}}}`, deployment, deployment, deployment)
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{flotillav1.LabelCluster: "member-1"}},
		Spec:       flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: []byte(raw)}}}},
	}
}

func apiextensionsScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDescheduledWorkIsDeletedInTheMember shows the other side of
// deletion intent: when the MyApp controller removes a Work because the
// placement no longer picks its cluster, it marks the Work, and the
// member's Deployment is deleted; the member still picked keeps its own.
func TestDescheduledWorkIsDeletedInTheMember(t *testing.T) {
	f := startFleet(t, 2)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	startAgent(t, f.agentOptions(t, "member-2", syncAddr))
	waitReady(t, f.hub, "member-1", "member-2")

	app := newApp("web", 1, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	eventually(t, "Deployment web in both members", 60*time.Second, func() error {
		for _, m := range []string{"member-1", "member-2"} {
			d, err := f.deployment(ctx, m, "default", "web")
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			uids[m] = d.UID
		}
		return nil
	})

	// The controller writes the MyApp's status meanwhile: retry on a
	// conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return err
		}
		app.Spec.Placement.ClusterAffinity.ClusterNames = []string{"member-2"}
		return f.hub.Update(ctx, app)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Deployment web deleted from member-1", 60*time.Second, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if apierrors.IsNotFound(err) || (err == nil && d.DeletionTimestamp != nil) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (uid %s)", d.UID)
	})
	d, err := f.deployment(ctx, "member-2", "default", "web")
	if err != nil || d.UID != uids["member-2"] {
		t.Fatalf("member-2's Deployment: %v (uid %s, was %s)", err, d.UID, uids["member-2"])
	}
}
