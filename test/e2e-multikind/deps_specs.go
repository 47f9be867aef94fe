//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The hub objects DependenciesSpec's MyApps use, in the spec's namespace.
const (
	depConfig  = "web-config"           // ConfigMap, mounted as a volume
	depDB      = "db-credentials"       // Secret, an env var (secretKeyRef)
	depPull    = "registry-credentials" // Secret of type dockerconfigjson, imagePullSecrets
	depMissing = "nope"                 // a Secret that never exists
)

// depObject is a dependency as a member holds it: its kind and a fresh
// object of that kind.
type depObject struct {
	kind, name string
}

func (d depObject) new() client.Object {
	switch d.kind {
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "Secret":
		return &corev1.Secret{}
	default:
		return &corev1.ServiceAccount{}
	}
}

func (d depObject) String() string { return d.kind + " " + d.name }

// DependenciesSpec: a MyApp whose pod template uses a ConfigMap (a
// volume), a Secret (an env var by secretKeyRef) and a dockerconfigjson
// Secret (imagePullSecrets) of its hub namespace, with a sidecar, a
// readiness probe and a Service, runs in every member with the three
// objects copied there as shared dependencies (flotilla.dev/dependency),
// the pod template as written plus a config hash, and a status per cluster
// that counts the Service's ready endpoints (the cluster's replicas) and
// lists every dependency Applied. An edit of the ConfigMap on the hub
// reaches every member (the time it took is logged, not asserted), moves
// the config hash and rolls the pods. A second MyApp using the same
// ConfigMap keeps it (same object) in the members when the first is
// deleted, whose Secrets go; the ConfigMap goes with its last user. A
// MyApp naming a missing Secret is Degraded DependencyMissing, naming it
// and where, and gets no Work and no Deployment anywhere.
func DependenciesSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 2)
	ctx := context.Background()
	hub := in.Provider.Hub()
	const sidecarImage = "registry.example.com/team/proxy:3.1"

	// What the spec creates on the hub goes when it ends, MyApps first (so
	// none of them is left naming a dependency that went before it). The
	// suite's teardown then deletes the namespaces.
	apps := []string{"web", "api", "broken"}
	t.Cleanup(func() {
		for _, name := range apps {
			app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: name}}
			if err := retryWrite(ctx, func() error { return client.IgnoreNotFound(hub.Delete(ctx, app)) }); err != nil {
				t.Errorf("cleanup: deleting MyApp %s: %v", name, err)
			}
		}
		if err := poll(ctx, convergeTimeout, func() error {
			var list flotillav1.MyAppList
			if err := hub.List(ctx, &list, client.InNamespace(in.Namespace)); err != nil {
				return err
			}
			if len(list.Items) > 0 {
				return fmt.Errorf("%d MyApps left in %s", len(list.Items), in.Namespace)
			}
			return nil
		}); err != nil {
			t.Errorf("cleanup: waiting for the MyApps to go: %v", err)
		}
		for _, d := range []depObject{{"ConfigMap", depConfig}, {"Secret", depDB}, {"Secret", depPull}} {
			obj := d.new()
			obj.SetNamespace(in.Namespace)
			obj.SetName(d.name)
			if err := client.IgnoreNotFound(hub.Delete(ctx, obj)); err != nil {
				t.Errorf("cleanup: deleting %s from the hub: %v", d, err)
			}
		}
	})

	// 1. The hub objects and a MyApp using them, Duplicated 2.
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: depConfig, Namespace: in.Namespace, Labels: map[string]string{"tier": "web"}},
			Data: map[string]string{"app.conf": "color=blue"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: depDB, Namespace: in.Namespace},
			Data: map[string][]byte{"password": []byte("s3cret")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: depPull, Namespace: in.Namespace}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}`)}},
	} {
		if err := hub.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s in the hub: %v", o, o.GetName(), err)
		}
	}
	web := newMyApp(in, "web", 2, duplicated())
	web.Spec.MainContainer = "web"
	web.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{
		Containers: []corev1.Container{
			{
				Name:  "web",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/check", "--ready"}}},
					PeriodSeconds: 5,
				},
				Env: []corev1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: depDB}, Key: "password"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web", ReadOnly: true}},
			},
			{Name: "proxy", Image: sidecarImage, Args: []string{"--upstream=127.0.0.1:8080"}},
		},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: depConfig}}}}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: depPull}},
	}}
	web.Spec.Service = &flotillav1.ServiceSpec{Ports: []flotillav1.ServicePort{{Name: "http", Port: 80, TargetPort: ptr.To(intstr.FromString("http"))}}}
	createMyApp(t, in, web)

	replicas := each(in.Members, 2)
	w := map[string]deployWant{}
	for m, r := range replicas {
		w[m] = deployWant{replicas: r, main: "web"}
	}
	webDeps := []depObject{{"ConfigMap", depConfig}, {"Secret", depDB}, {"Secret", depPull}}
	eventually(t, "Deployment web with 2 ready replicas of "+baseImage+" in container web in every member", convergeTimeout, deploymentsRolledOut(in, "web", w))
	eventually(t, "ConfigMap "+depConfig+", Secrets "+depDB+" and "+depPull+" and Service web in every member, as on the hub",
		convergeTimeout, memberDependencies(in, map[string]string{"app.conf": "color=blue"}))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", replicas))
	eventually(t, "MyApp web's status: per cluster endpoints.ready == its replicas and dependencies "+fmt.Sprint(webDeps)+" all Applied",
		convergeTimeout, endpointsAndDependencies(in, "web", replicas, webDeps))

	// The pod template runs as written, plus the config hash.
	hashes := map[string]string{}
	for _, m := range in.Members {
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "web"}, d); err != nil {
			t.Fatalf("%s: Deployment web: %v", m, err)
		}
		ps := d.Spec.Template.Spec
		if len(ps.Containers) != 2 || ps.Containers[0].Name != "web" || ps.Containers[0].Image != baseImage ||
			ps.Containers[1].Name != "proxy" || ps.Containers[1].Image != sidecarImage {
			t.Fatalf("%s: containers %+v, want web (%s) then proxy (%s)", m, ps.Containers, baseImage, sidecarImage)
		}
		c := ps.Containers[0]
		if c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil || strings.Join(c.ReadinessProbe.Exec.Command, " ") != "/bin/check --ready" {
			t.Errorf("%s: container web's readiness probe is %+v, want exec /bin/check --ready", m, c.ReadinessProbe)
		}
		if len(c.Env) != 1 || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef == nil || c.Env[0].ValueFrom.SecretKeyRef.Name != depDB {
			t.Errorf("%s: container web's env %+v, want DB_PASSWORD from Secret %s", m, c.Env, depDB)
		}
		if len(ps.Volumes) != 1 || ps.Volumes[0].ConfigMap == nil || ps.Volumes[0].ConfigMap.Name != depConfig ||
			len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/web" {
			t.Errorf("%s: volumes %+v, mounts %+v; want ConfigMap %s on /etc/web", m, ps.Volumes, c.VolumeMounts, depConfig)
		}
		if len(ps.ImagePullSecrets) != 1 || ps.ImagePullSecrets[0].Name != depPull {
			t.Errorf("%s: imagePullSecrets %v, want [%s]", m, ps.ImagePullSecrets, depPull)
		}
		h := d.Spec.Template.Annotations[flotillav1.AnnotationConfigHash]
		if h == "" {
			t.Fatalf("%s: Deployment web's pod template has no %s annotation: %v", m, flotillav1.AnnotationConfigHash, d.Spec.Template.Annotations)
		}
		hashes[m] = h
		svc := &corev1.Service{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "web"}, svc); err != nil {
			t.Fatalf("%s: Service web: %v", m, err)
		}
		if !maps.Equal(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
			t.Errorf("%s: Service web selects %v with ports %+v; want the Deployment's pods (%v) on 80", m, svc.Spec.Selector, svc.Spec.Ports, d.Spec.Selector.MatchLabels)
		}
	}
	t.Logf("config hash before the edit: %v", hashes)
	before, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatalf("Deployment web before the edit: %v", err)
	}

	// 2. Edit the ConfigMap on the hub: every member gets the new data
	// (how long it took is logged; the timing is measured, not asserted),
	// then the config hash moves and the pods roll.
	newData := map[string]string{"app.conf": "color=green"}
	var edited time.Time
	if err := retryWrite(ctx, func() error {
		cm := &corev1.ConfigMap{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: depConfig}, cm); err != nil {
			return err
		}
		cm.Data = newData
		edited = time.Now()
		return hub.Update(ctx, cm)
	}); err != nil {
		t.Fatalf("editing ConfigMap %s on the hub: %v", depConfig, err)
	}
	arrived := configArrival(t, in, depConfig, newData, edited)
	var slowest time.Duration
	var perMember []string
	for _, m := range in.Members {
		perMember = append(perMember, fmt.Sprintf("%s (%s) %v", m, in.Provider.SyncMode(m), arrived[m].Round(time.Millisecond)))
		slowest = max(slowest, arrived[m])
	}
	t.Logf("MEASURED: the ConfigMap edit reached all %d members %v after the hub update (the acceptance asks for 1s; not asserted): %s",
		len(in.Members), slowest.Round(time.Millisecond), strings.Join(perMember, ", "))

	newHashes := map[string]string{}
	eventually(t, "a new config hash on Deployment web's pod template in every member, rolled out to 2 new ready pods (no old pod left)", convergeTimeout, func() error {
		var problems []string
		for _, m := range in.Members {
			d := &appsv1.Deployment{}
			if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "web"}, d); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", m, err))
				continue
			}
			h := d.Spec.Template.Annotations[flotillav1.AnnotationConfigHash]
			if h == "" || h == hashes[m] {
				problems = append(problems, fmt.Sprintf("%s: config hash %q, want a new one (was %q)", m, h, hashes[m]))
				continue
			}
			if p := rolledOut(d, w[m]); p != "" {
				problems = append(problems, m+": "+p)
				continue
			}
			if p := podsOnHash(ctx, in, m, d, h); p != "" {
				problems = append(problems, m+": "+p)
				continue
			}
			newHashes[m] = h
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
	t.Logf("config hash after the edit: %v", newHashes)
	after, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatalf("Deployment web after the edit: %v", err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Errorf("the config roll must update Deployment web in place: %v", err)
	}
	eventually(t, "MyApp web Ready after the config roll", convergeTimeout, appReady(in, "web", replicas))
	eventually(t, "MyApp web's status after the config roll: endpoints.ready == replicas and dependencies Applied", convergeTimeout,
		endpointsAndDependencies(in, "web", replicas, webDeps))

	// 3. A second MyApp on the same ConfigMap: deleting web removes its
	// Secrets (and Deployment and Service) from the members, not the
	// ConfigMap api still uses; deleting api removes that too.
	api := newMyApp(in, "api", 1, duplicated())
	api.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{
		Containers: []corev1.Container{{Name: "api", VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/api"}}}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: depConfig}}}}},
	}}
	createMyApp(t, in, api)
	eventually(t, "Deployment api with 1 ready replica in every member", convergeTimeout, deploymentsRolledOut(in, "api", want(each(in.Members, 1))))
	eventually(t, "MyApp api Ready", convergeTimeout, appReady(in, "api", each(in.Members, 1)))
	eventually(t, "MyApp api's status lists ConfigMap "+depConfig+" Applied in every cluster", convergeTimeout,
		endpointsAndDependencies(in, "api", nil, []depObject{{"ConfigMap", depConfig}}))
	cmUIDs := map[string]types.UID{}
	for _, m := range in.Members {
		cm := &corev1.ConfigMap{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: depConfig}, cm); err != nil {
			t.Fatalf("%s: ConfigMap %s: %v", m, depConfig, err)
		}
		cmUIDs[m] = cm.UID
	}
	deleteMyApp(t, in, "web")
	eventually(t, "web's Deployment, Service and Secrets "+depDB+" and "+depPull+" gone from every member", convergeTimeout, func() error {
		var problems []string
		for _, m := range in.Members {
			for _, o := range []struct {
				obj  client.Object
				what string
			}{{&appsv1.Deployment{}, "Deployment web"}, {&corev1.Service{}, "Service web"}, {&corev1.Secret{}, "Secret " + depDB}, {&corev1.Secret{}, "Secret " + depPull}} {
				name := o.what[strings.LastIndex(o.what, " ")+1:]
				err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, o.obj)
				if !apierrors.IsNotFound(err) {
					problems = append(problems, fmt.Sprintf("%s: %s still there (%v)", m, o.what, err))
				}
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
	configKept := func() error {
		var problems []string
		for _, m := range in.Members {
			cm := &corev1.ConfigMap{}
			err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: depConfig}, cm)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s: %v", m, depConfig, err))
			case cm.UID != cmUIDs[m]:
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s recreated (uid %s, was %s)", m, depConfig, cm.UID, cmUIDs[m]))
			case !maps.Equal(cm.Data, newData):
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s data %v, want %v", m, depConfig, cm.Data, newData))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
	consistently(t, "ConfigMap "+depConfig+" kept (same UID) in every member while MyApp api uses it", 5*time.Second, configKept)
	eventually(t, "Deployment api still running in every member", convergeTimeout, deploymentsRolledOut(in, "api", want(each(in.Members, 1))))
	eventually(t, "MyApp api Ready with web gone", convergeTimeout, appReady(in, "api", each(in.Members, 1)))
	deleteMyApp(t, in, "api")
	configGone := func() error {
		var problems []string
		for _, m := range in.Members {
			err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: depConfig}, &corev1.ConfigMap{})
			if !apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s still there (%v)", m, depConfig, err))
			}
			err = in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "api"}, &appsv1.Deployment{})
			if !apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("%s: Deployment api still there (%v)", m, err))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
	eventually(t, "ConfigMap "+depConfig+" and Deployment api gone from every member with their last user", convergeTimeout, configGone)

	// 4. A MyApp naming a Secret that does not exist (beside the ConfigMap,
	// which does): Degraded DependencyMissing naming the Secret and the
	// field; no Work, so nothing of it in any member.
	broken := newMyApp(in, "broken", 1, duplicated())
	broken.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app",
			Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: depMissing}, Key: "token"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: depConfig}}}}},
	}}
	createMyApp(t, in, broken)
	wantInMessage := []string{fmt.Sprintf("Secret %q", depMissing), "spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name"}
	eventually(t, "MyApp broken Degraded with reason "+flotillav1.ReasonDependencyMissing+" naming "+strings.Join(wantInMessage, " and "), convergeTimeout, func() error {
		app, err := getMyApp(ctx, in, "broken")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionDegraded)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != flotillav1.ReasonDependencyMissing || c.ObservedGeneration != app.Generation {
			return fmt.Errorf("Degraded condition %s (generation %d)", conditionString(c), app.Generation)
		}
		for _, s := range wantInMessage {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("Degraded message %q does not name %s", c.Message, s)
			}
		}
		if r := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionReady); r != nil && r.Status == metav1.ConditionTrue {
			return fmt.Errorf("Ready condition %s, want not True", conditionString(r))
		}
		return nil
	})
	nothingOfBroken := func() error {
		var works flotillav1.WorkList
		if err := hub.List(ctx, &works, client.MatchingLabels{flotillav1.LabelMyAppName: "broken"}); err != nil {
			return fmt.Errorf("listing Works: %w", err)
		}
		var problems []string
		for _, wk := range works.Items {
			if wk.Labels[flotillav1.LabelMyAppNamespace] == in.Namespace {
				problems = append(problems, fmt.Sprintf("hub: Work %s/%s for %s exists", wk.Namespace, wk.Name, wk.Labels[flotillav1.LabelCluster]))
			}
		}
		for _, m := range in.Members {
			err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "broken"}, &appsv1.Deployment{})
			if !apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("%s: Deployment broken exists (%v)", m, err))
			}
			err = in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: depConfig}, &corev1.ConfigMap{})
			if !apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s applied for broken (%v)", m, depConfig, err))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
	consistently(t, "no Work for MyApp broken on the hub and nothing of it in any member while Secret "+depMissing+" is missing", 5*time.Second, nothingOfBroken)
	deleteMyApp(t, in, "broken")
}

// memberDependencies checks that every member holds the spec's ConfigMap
// (with data), both Secrets as on the hub, each marked as a dependency,
// and Service web.
func memberDependencies(in SpecInput, data map[string]string) func() error {
	return func() error {
		ctx := context.Background()
		var problems []string
		for _, m := range in.Members {
			c := in.Provider.Member(m)
			key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: in.Namespace, Name: name} }
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, key(depConfig), cm); err != nil {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s: %v", m, depConfig, err))
			} else if !maps.Equal(cm.Data, data) || cm.Labels[flotillav1.LabelDependency] != "true" || cm.Labels["tier"] != "web" {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %s data %v labels %v; want data %v, %s=true and tier=web", m, depConfig, cm.Data, cm.Labels, data, flotillav1.LabelDependency))
			}
			db := &corev1.Secret{}
			if err := c.Get(ctx, key(depDB), db); err != nil {
				problems = append(problems, fmt.Sprintf("%s: Secret %s: %v", m, depDB, err))
			} else if string(db.Data["password"]) != "s3cret" || db.Labels[flotillav1.LabelDependency] != "true" {
				problems = append(problems, fmt.Sprintf("%s: Secret %s keys %v labels %v; want password and %s=true", m, depDB, sortedKeys(db.Data), db.Labels, flotillav1.LabelDependency))
			}
			pull := &corev1.Secret{}
			if err := c.Get(ctx, key(depPull), pull); err != nil {
				problems = append(problems, fmt.Sprintf("%s: Secret %s: %v", m, depPull, err))
			} else if pull.Type != corev1.SecretTypeDockerConfigJson || len(pull.Data[corev1.DockerConfigJsonKey]) == 0 || pull.Labels[flotillav1.LabelDependency] != "true" {
				problems = append(problems, fmt.Sprintf("%s: Secret %s type %s keys %v labels %v; want %s with %s and %s=true", m, depPull, pull.Type, sortedKeys(pull.Data), pull.Labels,
					corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey, flotillav1.LabelDependency))
			}
			if err := c.Get(ctx, key("web"), &corev1.Service{}); err != nil {
				problems = append(problems, fmt.Sprintf("%s: Service web: %v", m, err))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
}

// endpointsAndDependencies checks MyApp name's status.clusters: one entry
// per member; with replicas, endpoints.ready equal to the cluster's
// replicas (and none not ready); the dependencies exactly deps, every one
// Applied.
func endpointsAndDependencies(in SpecInput, name string, replicas map[string]int32, deps []depObject) func() error {
	var wantDeps []string
	for _, d := range deps {
		wantDeps = append(wantDeps, d.kind+"/"+d.name+"=Applied")
	}
	sort.Strings(wantDeps)
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		var problems []string
		seen := map[string]bool{}
		for _, c := range app.Status.Clusters {
			seen[c.Name] = true
			if replicas != nil {
				switch {
				case c.Endpoints == nil:
					problems = append(problems, fmt.Sprintf("%s: no endpoints in status", c.Name))
				case c.Endpoints.Ready != replicas[c.Name] || c.Endpoints.NotReady != 0:
					problems = append(problems, fmt.Sprintf("%s: endpoints ready %d, notReady %d; want %d ready, 0 not ready", c.Name, c.Endpoints.Ready, c.Endpoints.NotReady, replicas[c.Name]))
				}
			}
			var got []string
			for _, d := range c.Dependencies {
				s := d.Kind + "/" + d.Name + "=" + d.State
				if d.Message != "" {
					s += " (" + d.Message + ")"
				}
				got = append(got, s)
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(wantDeps) {
				problems = append(problems, fmt.Sprintf("%s: dependencies %v, want %v", c.Name, got, wantDeps))
			}
		}
		for _, m := range in.Members {
			if !seen[m] {
				problems = append(problems, fmt.Sprintf("%s: no entry in status.clusters", m))
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("MyApp %s: %s", name, strings.Join(problems, "; "))
		}
		return nil
	}
}

// configArrival polls every member's copy of ConfigMap name every 20ms
// until each holds data, and returns how long after since each first did.
// It fails the test after convergeTimeout naming the members that never
// did.
func configArrival(t *testing.T, in SpecInput, name string, data map[string]string, since time.Time) map[string]time.Duration {
	t.Helper()
	ctx := context.Background()
	out := map[string]time.Duration{}
	last := map[string]string{}
	deadline := time.Now().Add(convergeTimeout)
	for len(out) < len(in.Members) {
		for _, m := range in.Members {
			if _, ok := out[m]; ok {
				continue
			}
			cm := &corev1.ConfigMap{}
			err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, cm)
			switch {
			case err != nil:
				last[m] = err.Error()
			case maps.Equal(cm.Data, data):
				out[m] = time.Since(since)
			default:
				last[m] = fmt.Sprintf("data %v", cm.Data)
			}
		}
		if len(out) == len(in.Members) {
			break
		}
		if time.Now().After(deadline) {
			var problems []string
			for _, m := range in.Members {
				if _, ok := out[m]; !ok {
					problems = append(problems, m+": "+last[m])
				}
			}
			t.Fatalf("timed out after %v waiting for the edited ConfigMap %s (data %v) in every member: %s", convergeTimeout, name, data, strings.Join(problems, "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out
}

// podsOnHash says what is not yet as wanted of Deployment d's pods in
// member m: every pod it selects carries config hash h and is Ready, and
// there are as many as its replicas ("" when all is).
func podsOnHash(ctx context.Context, in SpecInput, m string, d *appsv1.Deployment, h string) string {
	var pods corev1.PodList
	if err := in.Provider.Member(m).List(ctx, &pods, client.InNamespace(in.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return err.Error()
	}
	var ready int32
	var old []string
	for _, p := range pods.Items {
		if p.Annotations[flotillav1.AnnotationConfigHash] != h {
			old = append(old, fmt.Sprintf("%s (hash %q)", p.Name, p.Annotations[flotillav1.AnnotationConfigHash]))
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp.IsZero() {
				ready++
			}
		}
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	switch {
	case len(old) > 0:
		return fmt.Sprintf("pods of the old config still there: %v", old)
	case ready != want || int32(len(pods.Items)) != want:
		return fmt.Sprintf("%d pods, %d of them Ready on hash %s; want %d", len(pods.Items), ready, h, want)
	}
	return ""
}

// deleteMyApp deletes MyApp name and waits until it is gone from the hub.
func deleteMyApp(t *testing.T, in SpecInput, name string) {
	t.Helper()
	ctx := context.Background()
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: name}}
	if err := retryWrite(ctx, func() error { return in.Provider.Hub().Delete(ctx, app) }); err != nil {
		t.Fatalf("deleting MyApp %s: %v", name, err)
	}
	eventually(t, "MyApp "+name+" gone from the hub", convergeTimeout, func() error {
		_, err := getMyApp(ctx, in, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}
