package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// appUsing is a MyApp whose pods read ConfigMap config as a volume, an env
// var from Secret secret (when set), pull with Secret pull (when set) and
// run as ServiceAccount sa (when set), in member-1 (pull) and member-2
// (push).
func appUsing(name, config, secret, pull, sa string) *flotillav1.MyApp {
	app := newApp(name, 1, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}})
	c := corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}
	if secret != "" {
		c.Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "password"}}}}
	}
	spec := &corev1.PodSpec{
		Containers: []corev1.Container{c},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: config}}}}},
		ServiceAccountName: sa,
	}
	if pull != "" {
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: pull}}
	}
	app.Spec.Template = &flotillav1.PodTemplate{Spec: spec}
	return app
}

// TestDependenciesTravelWithTheApp runs a hub, an agent for member-1 and
// member-2 in Push mode. Two MyApps share ConfigMap app-config; web also
// uses Secret db (env), Secret regcred (imagePullSecrets) and
// ServiceAccount web. Every one reaches both members as a shared
// dependency; a ConfigMap edit on the hub reaches them and changes the
// pods' config hash; deleting web removes what only web used and keeps
// app-config, which api still uses, until api goes too. A member's own
// ConfigMap of another name is never touched. An app that names a
// missing Secret is Degraded DependencyMissing, naming it, with no Work
// written, and runs once the Secret exists.
func TestDependenciesTravelWithTheApp(t *testing.T) {
	f, _ := startPullAndPush(t)
	ctx := context.Background()
	members := []string{"member-1", "member-2"}

	hubObjects := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "default", Labels: map[string]string{"tier": "web"}},
			Data: map[string]string{"app.conf": "color=blue"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"}, Data: map[string][]byte{"password": []byte("s3cret")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "default"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}},
	}
	for _, o := range hubObjects {
		if err := f.hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// A bystander in each member.
	bystanders := map[string]types.UID{}
	for _, m := range members {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: "default"}, Data: map[string]string{"k": "v"}}
		if err := f.members[m].Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		bystanders[m] = cm.UID
	}

	web := appUsing("web", "app-config", "db", "regcred", "web")
	api := appUsing("api", "app-config", "", "", "")
	for _, a := range []*flotillav1.MyApp{web, api} {
		if err := f.hub.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}

	get := func(m string, obj client.Object, name string) error {
		return f.members[m].Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, obj)
	}
	hashes := map[string]string{}
	eventually(t, "app-config, db, regcred and ServiceAccount web in both members, and both apps' Deployments", 60*time.Second, func() error {
		for _, m := range members {
			cm := &corev1.ConfigMap{}
			if err := get(m, cm, "app-config"); err != nil {
				return fmt.Errorf("%s: ConfigMap app-config: %w", m, err)
			}
			if cm.Data["app.conf"] != "color=blue" || cm.Labels["tier"] != "web" || cm.Labels[flotillav1.LabelDependency] != "true" ||
				cm.Labels[flotillav1.LabelCluster] != m || cm.Labels[flotillav1.LabelFleet] == "" || cm.Labels[flotillav1.LabelWork] != "" {
				return fmt.Errorf("%s: ConfigMap app-config: data %v, labels %v", m, cm.Data, cm.Labels)
			}
			s := &corev1.Secret{}
			if err := get(m, s, "db"); err != nil || string(s.Data["password"]) != "s3cret" {
				return fmt.Errorf("%s: Secret db: %v", m, err)
			}
			if err := get(m, s, "regcred"); err != nil || s.Type != corev1.SecretTypeDockerConfigJson {
				return fmt.Errorf("%s: Secret regcred: %v (type %s)", m, err, s.Type)
			}
			if err := get(m, &corev1.ServiceAccount{}, "web"); err != nil {
				return fmt.Errorf("%s: ServiceAccount web: %w", m, err)
			}
			for _, name := range []string{"web", "api"} {
				d, err := f.deployment(ctx, m, "default", name)
				if err != nil {
					return fmt.Errorf("%s: Deployment %s: %w", m, name, err)
				}
				h := d.Spec.Template.Annotations[flotillav1.AnnotationConfigHash]
				if h == "" {
					return fmt.Errorf("%s: Deployment %s has no %s annotation", m, name, flotillav1.AnnotationConfigHash)
				}
				hashes[m+"/"+name] = h
			}
		}
		return nil
	})

	// Each cluster's status lists web's dependencies, applied.
	eventually(t, "MyApp web's status lists its 4 dependencies Applied in both clusters", 30*time.Second, func() error {
		got := &flotillav1.MyApp{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(web), got); err != nil {
			return err
		}
		if len(got.Status.Clusters) != len(members) {
			return fmt.Errorf("status.clusters: %+v", got.Status.Clusters)
		}
		for _, c := range got.Status.Clusters {
			want := []flotillav1.DependencyStatus{{Kind: "ConfigMap", Name: "app-config", State: "Applied"}, {Kind: "Secret", Name: "db", State: "Applied"},
				{Kind: "Secret", Name: "regcred", State: "Applied"}, {Kind: "ServiceAccount", Name: "web", State: "Applied"}}
			if fmt.Sprint(c.Dependencies) != fmt.Sprint(want) {
				return fmt.Errorf("%s: dependencies %+v, want %+v", c.Name, c.Dependencies, want)
			}
		}
		return nil
	})

	// Edit the ConfigMap on the hub: it reaches both members, and the pod
	// templates' hash moves.
	cm := &corev1.ConfigMap{}
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: "default", Name: "app-config"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["app.conf"] = "color=green"
	edited := time.Now()
	if err := f.hub.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the edited app-config in both members", 30*time.Second, func() error {
		for _, m := range members {
			got := &corev1.ConfigMap{}
			if err := get(m, got, "app-config"); err != nil || got.Data["app.conf"] != "color=green" {
				return fmt.Errorf("%s: app-config %v (%v)", m, got.Data, err)
			}
		}
		return nil
	})
	t.Logf("the ConfigMap edit reached both members %v after the hub update", time.Since(edited).Round(time.Millisecond))
	eventually(t, "new config hash on both apps' pod templates", 30*time.Second, func() error {
		for _, m := range members {
			for _, name := range []string{"web", "api"} {
				d, err := f.deployment(ctx, m, "default", name)
				if err != nil {
					return err
				}
				if h := d.Spec.Template.Annotations[flotillav1.AnnotationConfigHash]; h == hashes[m+"/"+name] {
					return fmt.Errorf("%s: Deployment %s still has hash %s", m, name, h)
				}
			}
		}
		return nil
	})

	// Deleting web removes what only web used; app-config stays for api.
	cmUIDs := map[string]types.UID{}
	for _, m := range members {
		got := &corev1.ConfigMap{}
		if err := get(m, got, "app-config"); err != nil {
			t.Fatal(err)
		}
		cmUIDs[m] = got.UID
	}
	if err := f.hub.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web's Deployment, Secrets and ServiceAccount gone from both members", 60*time.Second, func() error {
		for _, m := range members {
			if _, err := f.deployment(ctx, m, "default", "web"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: Deployment web: %v", m, err)
			}
			for _, o := range []struct {
				obj  client.Object
				name string
			}{{&corev1.Secret{}, "db"}, {&corev1.Secret{}, "regcred"}, {&corev1.ServiceAccount{}, "web"}} {
				if err := get(m, o.obj, o.name); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s: %T %s still there (%v)", m, o.obj, o.name, err)
				}
			}
		}
		return nil
	})
	consistently(t, "app-config kept in both members while api uses it", 3*time.Second, func() error {
		for _, m := range members {
			got := &corev1.ConfigMap{}
			if err := get(m, got, "app-config"); err != nil || got.UID != cmUIDs[m] {
				return fmt.Errorf("%s: app-config %v, uid %s (was %s)", m, err, got.UID, cmUIDs[m])
			}
			if _, err := f.deployment(ctx, m, "default", "api"); err != nil {
				return fmt.Errorf("%s: Deployment api: %w", m, err)
			}
		}
		return nil
	})
	if err := f.hub.Delete(ctx, api); err != nil {
		t.Fatal(err)
	}
	eventually(t, "app-config gone from both members with its last user", 60*time.Second, func() error {
		for _, m := range members {
			if err := get(m, &corev1.ConfigMap{}, "app-config"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: app-config still there (%v)", m, err)
			}
		}
		return nil
	})
	for _, m := range members {
		got := &corev1.ConfigMap{}
		if err := get(m, got, "someone-elses"); err != nil || got.UID != bystanders[m] {
			t.Errorf("%s: the member's own ConfigMap was touched: %v, uid %s (was %s)", m, err, got.UID, bystanders[m])
		}
	}

	// A missing Secret: DependencyMissing, naming it; no Work, nothing in
	// the members; the app runs once the Secret exists.
	broken := appUsing("broken", "app-config-2", "missing", "", "")
	if err := f.hub.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config-2", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Create(ctx, broken); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, f.hub, broken, flotillav1.ReasonDependencyMissing, `Secret "missing"`, "spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name", "hub namespace default")
	var ws flotillav1.WorkList
	if err := f.hub.List(ctx, &ws, client.MatchingLabels{flotillav1.LabelMyAppName: "broken"}); err != nil || len(ws.Items) != 0 {
		t.Fatalf("Works of MyApp broken: %d (%v), want none while a dependency is missing", len(ws.Items), err)
	}
	for _, m := range members {
		if err := get(m, &corev1.ConfigMap{}, "app-config-2"); !apierrors.IsNotFound(err) {
			t.Errorf("%s: app-config-2 applied although the app's Secret is missing (%v)", m, err)
		}
	}
	if err := f.hub.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "missing", Namespace: "default"},
		Data: map[string][]byte{"password": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "MyApp broken running in both members once its Secret exists", 60*time.Second, func() error {
		for _, m := range members {
			if _, err := f.deployment(ctx, m, "default", "broken"); err != nil {
				return fmt.Errorf("%s: Deployment broken: %w", m, err)
			}
			if err := get(m, &corev1.Secret{}, "missing"); err != nil {
				return fmt.Errorf("%s: Secret missing: %w", m, err)
			}
		}
		return nil
	})
}
