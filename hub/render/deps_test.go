package render

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// fakeDeps is a DependencySource over a map of "Kind/name" to hub object.
type fakeDeps struct {
	objs  map[string]client.Object
	err   error    // returned for every lookup when set
	calls []string // "Kind/name" of every lookup, in order
}

func newFakeDeps(objs ...client.Object) *fakeDeps {
	f := &fakeDeps{objs: map[string]client.Object{}}
	for _, o := range objs {
		f.put(o)
	}
	return f
}

func depKind(o client.Object) string {
	switch o.(type) {
	case *corev1.ConfigMap:
		return KindConfigMap
	case *corev1.Secret:
		return KindSecret
	case *corev1.ServiceAccount:
		return KindServiceAccount
	}
	panic("fakeDeps: unexpected type")
}

func (f *fakeDeps) put(o client.Object) { f.objs[depKind(o)+"/"+o.GetName()] = o }

func (f *fakeDeps) Dependency(kind, name string) (client.Object, error) {
	f.calls = append(f.calls, kind+"/"+name)
	if f.err != nil {
		return nil, f.err
	}
	if o, ok := f.objs[kind+"/"+name]; ok {
		return o, nil
	}
	// An untyped nil: the object does not exist.
	return nil, nil
}

// hubMeta is the metadata of a hub object of namespace shop, with all the
// server- and user-set metadata a copy must leave behind.
func hubMeta(name, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace:         "shop",
		Name:              name,
		UID:               types.UID("uid-" + name),
		ResourceVersion:   rv,
		Generation:        3,
		CreationTimestamp: metav1.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		Labels: map[string]string{
			"team":                         "shop",
			"app.kubernetes.io/part-of":    "web",
			flotillav1.LabelDependency:     "spoofed",
			"flotilla.dev/something":       "hub-only",
			flotillav1.LabelMyAppName:      "other",
			flotillav1.LabelMyAppNamespace: "other",
		},
		Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": "{}",
			flotillav1.AnnotationSourceVersion:                 "spoofed",
		},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "owner", UID: "owner-uid"}},
		Finalizers:      []string{"example.com/keep"},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}
}

// wantDepLabels are the labels of a copy of an object with hubMeta's.
var wantDepLabels = map[string]string{"team": "shop", "app.kubernetes.io/part-of": "web", flotillav1.LabelDependency: "true"}

func hubConfigMap(name, rv string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: hubMeta(name, rv), Data: data}
}

func hubSecret(name, rv string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: hubMeta(name, rv), Type: typ, Data: data}
}

func hubServiceAccount(name, rv string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: hubMeta(name, rv)}
}

// withPodSpec sets spec.template.spec to a copy of spec with a main
// container "web" prepended when spec has no containers.
func withPodSpec(spec corev1.PodSpec) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) {
		s := spec.DeepCopy()
		if len(s.Containers) == 0 {
			s.Containers = []corev1.Container{{Name: "web"}}
		}
		a.Spec.Template = &flotillav1.PodTemplate{Spec: s}
	}
}

// depsPodSpec uses a ConfigMap volume, a Secret env var, an image pull
// secret and a ServiceAccount.
func depsPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName: "web-sa",
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
		Containers: []corev1.Container{{
			Name: "web",
			Env: []corev1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password",
			}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}},
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"},
		}}}},
	}
}

// depsObjects are the hub objects depsPodSpec uses.
func depsObjects() []client.Object {
	cm := hubConfigMap("web-config", "101", map[string]string{"web.yaml": "port: 8080\n"})
	cm.BinaryData = map[string][]byte{"logo.png": {0x89, 'P', 'N', 'G'}}
	db := hubSecret("db", "102", corev1.SecretTypeOpaque, map[string][]byte{"password": []byte("s3cret")})
	db.Immutable = ptr.To(true)
	reg := hubSecret("regcred", "103", corev1.SecretTypeDockerConfigJson, map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)})
	sa := hubServiceAccount("web-sa", "104")
	sa.AutomountServiceAccountToken = ptr.To(false)
	sa.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	return []client.Object{cm, db, reg, sa}
}

// decodedManifest is one manifest of a Work: its kind and name, its raw
// JSON and that JSON as a map.
type decodedManifest struct {
	kind, name string
	raw        []byte
	obj        map[string]any
}

func decodeManifests(t *testing.T, w *flotillav1.Work) []decodedManifest {
	t.Helper()
	out := make([]decodedManifest, len(w.Spec.Manifests))
	for i, m := range w.Spec.Manifests {
		var obj map[string]any
		if err := json.Unmarshal(m.Raw, &obj); err != nil {
			t.Fatalf("manifest %d: %v: %s", i, err, m.Raw)
		}
		md, _ := obj["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		kind, _ := obj["kind"].(string)
		out[i] = decodedManifest{kind: kind, name: name, raw: m.Raw, obj: obj}
	}
	return out
}

func manifestKeys(ms []decodedManifest) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.kind + "/" + m.name
	}
	return out
}

// workDeployment is the Deployment of w's manifests.
func workDeployment(t *testing.T, w *flotillav1.Work) *appsv1.Deployment {
	t.Helper()
	for _, m := range decodeManifests(t, w) {
		if m.kind == "Deployment" {
			var d appsv1.Deployment
			if err := json.Unmarshal(m.raw, &d); err != nil {
				t.Fatal(err)
			}
			return &d
		}
	}
	t.Fatalf("the Work has no Deployment: %v", manifestKeys(decodeManifests(t, w)))
	return nil
}

func mustWork(t *testing.T, app *flotillav1.MyApp, cluster string, deps DependencySource) *flotillav1.Work {
	t.Helper()
	w, _, err := Work(app, cluster, member(cluster, "eu-west", nil), 2, "", deps)
	if err != nil {
		t.Fatalf("rendering the Work of %s for %s: %v", app.Name, cluster, err)
	}
	return w
}

func TestDependencyRefs(t *testing.T) {
	cmEnv := func(name string, optional *bool) corev1.EnvVar {
		return corev1.EnvVar{Name: "CM_" + name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k", Optional: optional}}}
	}
	secretEnv := func(name string, optional *bool) corev1.EnvVar {
		return corev1.EnvVar{Name: "SECRET_" + name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k", Optional: optional}}}
	}
	cmFrom := func(name string, optional *bool) corev1.EnvFromSource {
		return corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: optional}}
	}
	secretFrom := func(name string, optional *bool) corev1.EnvFromSource {
		return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: optional}}
	}
	cmVol := func(name string, optional *bool) corev1.Volume {
		return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: optional}}}
	}
	secretVol := func(name string, optional *bool) corev1.Volume {
		return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, Optional: optional}}}
	}
	yes, no := ptr.To(true), ptr.To(false)
	const sp = "spec.template.spec."

	tests := []struct {
		name string
		spec corev1.PodSpec
		want []DependencyRef
	}{{
		name: "an empty pod spec uses nothing",
		spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
	}, {
		name: "every kind of reference, sorted by kind and name, each once with its first field",
		spec: corev1.PodSpec{
			ServiceAccountName: "web-sa",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
			InitContainers: []corev1.Container{{
				Name: "migrate",
				Env:  []corev1.EnvVar{cmEnv("init-config", nil), secretEnv("db", yes)},
			}},
			Containers: []corev1.Container{{
				Name:    "web",
				Env:     []corev1.EnvVar{{Name: "PLAIN", Value: "1"}, secretEnv("db", nil), cmEnv("app-config", nil)},
				EnvFrom: []corev1.EnvFromSource{cmFrom("env-config", nil), secretFrom("env-secret", yes)},
			}, {
				Name: "proxy",
				Env:  []corev1.EnvVar{{Name: "FIELD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				// The same ConfigMap again, later: one ref, the first field.
				EnvFrom: []corev1.EnvFromSource{cmFrom("files", nil)},
			}},
			Volumes: []corev1.Volume{
				cmVol("files", nil),
				secretVol("certs", nil),
				{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-cm"}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-secret"}}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{DownwardAPI: &corev1.DownwardAPIProjection{}},
				}}}},
				{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: "secrets-store.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-creds"},
				}}},
				{Name: "csi-without-secret", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "other"}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
		want: []DependencyRef{
			{Kind: KindConfigMap, Name: "app-config", Field: sp + "containers[0].env[2].valueFrom.configMapKeyRef.name"},
			{Kind: KindConfigMap, Name: "env-config", Field: sp + "containers[0].envFrom[0].configMapRef.name"},
			{Kind: KindConfigMap, Name: "files", Field: sp + "containers[1].envFrom[0].configMapRef.name"},
			{Kind: KindConfigMap, Name: "init-config", Field: sp + "initContainers[0].env[0].valueFrom.configMapKeyRef.name"},
			{Kind: KindConfigMap, Name: "proj-cm", Field: sp + "volumes[2].projected.sources[0].configMap.name"},
			{Kind: KindSecret, Name: "certs", Field: sp + "volumes[1].secret.secretName"},
			{Kind: KindSecret, Name: "csi-creds", Field: sp + "volumes[3].csi.nodePublishSecretRef.name"},
			// Optional in the init container, required in the main one.
			{Kind: KindSecret, Name: "db", Field: sp + "initContainers[0].env[1].valueFrom.secretKeyRef.name"},
			{Kind: KindSecret, Name: "env-secret", Optional: true, Field: sp + "containers[0].envFrom[1].secretRef.name"},
			{Kind: KindSecret, Name: "proj-secret", Field: sp + "volumes[2].projected.sources[1].secret.name"},
			{Kind: KindSecret, Name: "regcred", Field: sp + "imagePullSecrets[0].name"},
			{Kind: KindServiceAccount, Name: "web-sa", Field: sp + "serviceAccountName"},
		},
	}, {
		name: "optional only when every reference is optional",
		spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:    "web",
				Env:     []corev1.EnvVar{cmEnv("all-optional", yes), cmEnv("mixed", yes), secretEnv("false-is-required", no), secretEnv("pull", yes)},
				EnvFrom: []corev1.EnvFromSource{cmFrom("mixed", nil)},
			}},
			Volumes: []corev1.Volume{
				cmVol("all-optional", yes),
				{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "all-optional"}, Optional: yes}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-optional"}, Optional: yes}},
				}}}},
				secretVol("vol-optional", yes),
			},
			// An image pull secret cannot be optional.
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}},
		},
		want: []DependencyRef{
			{Kind: KindConfigMap, Name: "all-optional", Optional: true, Field: sp + "containers[0].env[0].valueFrom.configMapKeyRef.name"},
			{Kind: KindConfigMap, Name: "mixed", Field: sp + "containers[0].env[1].valueFrom.configMapKeyRef.name"},
			{Kind: KindSecret, Name: "false-is-required", Field: sp + "containers[0].env[2].valueFrom.secretKeyRef.name"},
			{Kind: KindSecret, Name: "proj-optional", Optional: true, Field: sp + "volumes[1].projected.sources[1].secret.name"},
			{Kind: KindSecret, Name: "pull", Field: sp + "containers[0].env[3].valueFrom.secretKeyRef.name"},
			{Kind: KindSecret, Name: "vol-optional", Optional: true, Field: sp + "volumes[2].secret.secretName"},
		},
	}, {
		name: "a ConfigMap and a Secret of the same name are two refs",
		spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", EnvFrom: []corev1.EnvFromSource{secretFrom("same", nil), cmFrom("same", nil)},
		}}},
		want: []DependencyRef{
			{Kind: KindConfigMap, Name: "same", Field: sp + "containers[0].envFrom[1].configMapRef.name"},
			{Kind: KindSecret, Name: "same", Field: sp + "containers[0].envFrom[0].secretRef.name"},
		},
	}, {
		name: "references without a name are no refs",
		spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Env: []corev1.EnvVar{cmEnv("", nil)}, EnvFrom: []corev1.EnvFromSource{secretFrom("", nil)}}},
			Volumes:    []corev1.Volume{cmVol("", nil), secretVol("", nil)},
		},
	}, {
		name: `serviceAccountName "default" is no ref`,
		spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "web"}}},
	}, {
		name: `serviceAccountName "default" wins over a deprecated serviceAccount`,
		spec: corev1.PodSpec{ServiceAccountName: "default", DeprecatedServiceAccount: "legacy", Containers: []corev1.Container{{Name: "web"}}},
	}, {
		name: "no service account is no ref",
		spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
	}, {
		name: "the deprecated serviceAccount counts when serviceAccountName is empty",
		spec: corev1.PodSpec{DeprecatedServiceAccount: "legacy", Containers: []corev1.Container{{Name: "web"}}},
		want: []DependencyRef{{Kind: KindServiceAccount, Name: "legacy", Field: sp + "serviceAccount"}},
	}, {
		name: `a deprecated serviceAccount "default" is no ref`,
		spec: corev1.PodSpec{DeprecatedServiceAccount: "default", Containers: []corev1.Container{{Name: "web"}}},
	}, {
		name: "serviceAccountName wins over the deprecated serviceAccount",
		spec: corev1.PodSpec{ServiceAccountName: "current", DeprecatedServiceAccount: "legacy", Containers: []corev1.Container{{Name: "web"}}},
		want: []DependencyRef{{Kind: KindServiceAccount, Name: "current", Field: sp + "serviceAccountName"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.spec.DeepCopy()
			got := DependencyRefs(&tt.spec)
			if len(got) != len(tt.want) || (len(got) > 0 && !slices.Equal(got, tt.want)) {
				t.Errorf("DependencyRefs =\n%s\nwant\n%s", refsString(got), refsString(tt.want))
			}
			if !equality.Semantic.DeepEqual(&tt.spec, before) {
				t.Error("DependencyRefs changed the pod spec")
			}
		})
	}
}

func refsString(refs []DependencyRef) string {
	var b strings.Builder
	for _, r := range refs {
		b.WriteString("  " + r.Kind + " " + r.Name)
		if r.Optional {
			b.WriteString(" (optional)")
		}
		b.WriteString(" at " + r.Field + "\n")
	}
	if len(refs) == 0 {
		b.WriteString("  (none)\n")
	}
	return b.String()
}

func TestWorkCarriesDependencies(t *testing.T) {
	service := &flotillav1.ServiceSpec{Ports: []flotillav1.ServicePort{{Name: "http", Port: 80}}}
	euConfig := patch(flotillav1.JSONPatchAdd, "/spec/template/spec/volumes/-", `{"name":"eu","configMap":{"name":"eu-config"}}`)
	tests := []struct {
		name      string
		app       *flotillav1.MyApp
		cluster   string
		extra     []client.Object
		wantKeys  []string
		namespace string
	}{{
		name:    "dependencies come first, in DependencyRefs order, then the Deployment",
		app:     newApp(withPodSpec(depsPodSpec())),
		cluster: "eu-1",
		wantKeys: []string{"ConfigMap/web-config", "Secret/db", "Secret/regcred", "ServiceAccount/web-sa",
			"Deployment/web"},
		namespace: "shop",
	}, {
		name: "with spec.service the Service comes last; targetNamespace places the copies",
		app: newApp(withPodSpec(depsPodSpec()), func(a *flotillav1.MyApp) {
			a.Spec.Service = service
			a.Spec.TargetNamespace = "prod"
		}),
		cluster: "eu-1",
		wantKeys: []string{"ConfigMap/web-config", "Secret/db", "Secret/regcred", "ServiceAccount/web-sa",
			"Deployment/web", "Service/web"},
		namespace: "prod",
	}, {
		name: "a ConfigMap an override's patch adds travels to the clusters the override selects",
		app: newApp(withPodSpec(depsPodSpec()), withOverrides(flotillav1.ClusterOverride{
			Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}}, Patches: []flotillav1.JSONPatch{euConfig},
		})),
		cluster: "eu-1",
		extra:   []client.Object{hubConfigMap("eu-config", "201", map[string]string{"region": "eu"})},
		wantKeys: []string{"ConfigMap/eu-config", "ConfigMap/web-config", "Secret/db", "Secret/regcred", "ServiceAccount/web-sa",
			"Deployment/web"},
		namespace: "shop",
	}, {
		name: "... and not to the others",
		app: newApp(withPodSpec(depsPodSpec()), withOverrides(flotillav1.ClusterOverride{
			Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}}, Patches: []flotillav1.JSONPatch{euConfig},
		})),
		cluster:   "us-1",
		extra:     []client.Object{hubConfigMap("eu-config", "201", map[string]string{"region": "eu"})},
		wantKeys:  []string{"ConfigMap/web-config", "Secret/db", "Secret/regcred", "ServiceAccount/web-sa", "Deployment/web"},
		namespace: "shop",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newFakeDeps(append(depsObjects(), tt.extra...)...)
			hub := map[string]client.Object{}
			for k, o := range src.objs {
				hub[k] = o.DeepCopyObject().(client.Object)
			}
			w := mustWork(t, tt.app, tt.cluster, src)
			ms := decodeManifests(t, w)
			if got := manifestKeys(ms); !slices.Equal(got, tt.wantKeys) {
				t.Fatalf("manifests %v, want %v", got, tt.wantKeys)
			}
			for _, m := range ms {
				hubObj, isDep := src.objs[m.kind+"/"+m.name]
				if !isDep {
					continue
				}
				t.Run(m.kind+"/"+m.name, func(t *testing.T) {
					checkDependencyManifest(t, m, hubObj, tt.namespace)
				})
			}
			// The Deployment is not marked as a dependency.
			if d := workDeployment(t, w); d.Labels[flotillav1.LabelDependency] != "" {
				t.Errorf("the Deployment carries %s=%s", flotillav1.LabelDependency, d.Labels[flotillav1.LabelDependency])
			}
			for k, o := range src.objs {
				if !equality.Semantic.DeepEqual(o, hub[k]) {
					t.Errorf("rendering changed the hub's %s", k)
				}
			}
		})
	}
}

// checkDependencyManifest checks that m is the copy of hubObj for
// namespace: metadata name, namespace, labels and annotations only, and
// the content of hubObj.
func checkDependencyManifest(t *testing.T, m decodedManifest, hubObj client.Object, namespace string) {
	t.Helper()
	if m.obj["apiVersion"] != "v1" {
		t.Errorf("apiVersion = %v, want v1", m.obj["apiVersion"])
	}
	md := m.obj["metadata"].(map[string]any)
	if keys := slices.Sorted(maps.Keys(md)); !slices.Equal(keys, []string{"annotations", "labels", "name", "namespace"}) {
		t.Errorf("metadata has %v, want annotations, labels, name and namespace only: %s", keys, m.raw)
	}
	if _, ok := m.obj["status"]; ok {
		t.Errorf("the copy has a status: %s", m.raw)
	}
	var meta metav1.ObjectMeta
	if b, err := json.Marshal(md); err != nil || json.Unmarshal(b, &meta) != nil {
		t.Fatalf("metadata does not decode: %s", m.raw)
	}
	if meta.Namespace != namespace || meta.Name != hubObj.GetName() {
		t.Errorf("copy is %s/%s, want %s/%s", meta.Namespace, meta.Name, namespace, hubObj.GetName())
	}
	if !maps.Equal(meta.Labels, wantDepLabels) {
		t.Errorf("labels = %v, want %v (the hub's but flotilla.dev/*, and the dependency label)", meta.Labels, wantDepLabels)
	}
	wantAnn := map[string]string{flotillav1.AnnotationSourceVersion: hubObj.GetResourceVersion()}
	if !maps.Equal(meta.Annotations, wantAnn) {
		t.Errorf("annotations = %v, want %v", meta.Annotations, wantAnn)
	}
	switch h := hubObj.(type) {
	case *corev1.ConfigMap:
		var got corev1.ConfigMap
		if err := json.Unmarshal(m.raw, &got); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got.Data, h.Data) || !equality.Semantic.DeepEqual(got.BinaryData, h.BinaryData) || !equality.Semantic.DeepEqual(got.Immutable, h.Immutable) {
			t.Errorf("ConfigMap content %v %v %v, want %v %v %v", got.Data, got.BinaryData, got.Immutable, h.Data, h.BinaryData, h.Immutable)
		}
	case *corev1.Secret:
		var got corev1.Secret
		if err := json.Unmarshal(m.raw, &got); err != nil {
			t.Fatal(err)
		}
		if got.Type != h.Type || !equality.Semantic.DeepEqual(got.Data, h.Data) || !equality.Semantic.DeepEqual(got.Immutable, h.Immutable) {
			t.Errorf("Secret type %q data %q immutable %v, want %q %q %v", got.Type, got.Data, got.Immutable, h.Type, h.Data, h.Immutable)
		}
	case *corev1.ServiceAccount:
		var got corev1.ServiceAccount
		if err := json.Unmarshal(m.raw, &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.ImagePullSecrets, h.ImagePullSecrets) || !equality.Semantic.DeepEqual(got.AutomountServiceAccountToken, h.AutomountServiceAccountToken) {
			t.Errorf("ServiceAccount %v %v, want %v %v", got.ImagePullSecrets, got.AutomountServiceAccountToken, h.ImagePullSecrets, h.AutomountServiceAccountToken)
		}
	}
}

// configHash is the config hash annotation of w's Deployment, and whether
// it has one.
func configHash(t *testing.T, w *flotillav1.Work) (string, bool) {
	t.Helper()
	h, ok := workDeployment(t, w).Spec.Template.Annotations[flotillav1.AnnotationConfigHash]
	return h, ok
}

func TestConfigHash(t *testing.T) {
	baseApp := func(opts ...func(*flotillav1.MyApp)) *flotillav1.MyApp {
		return newApp(append([]func(*flotillav1.MyApp){withPodSpec(depsPodSpec()), func(a *flotillav1.MyApp) {
			a.Spec.Template.Annotations = map[string]string{"prometheus.io/scrape": "true"}
		}}, opts...)...)
	}
	base := mustWork(t, baseApp(), "eu-1", newFakeDeps(depsObjects()...))
	baseHash, ok := configHash(t, base)
	if !ok || baseHash == "" {
		t.Fatalf("no %s on the pod template of an app with a ConfigMap and Secrets", flotillav1.AnnotationConfigHash)
	}
	if d := workDeployment(t, base); d.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("the hash replaced the template's annotations: %v", d.Spec.Template.Annotations)
	}
	if again, _ := configHash(t, mustWork(t, baseApp(), "eu-1", newFakeDeps(depsObjects()...))); again != baseHash {
		t.Errorf("rendering twice gives hashes %s and %s", baseHash, again)
	}
	if explicit, _ := configHash(t, mustWork(t, baseApp(func(a *flotillav1.MyApp) { a.Spec.RolloutOnConfigChange = ptr.To(true) }), "eu-1", newFakeDeps(depsObjects()...))); explicit != baseHash {
		t.Errorf("rolloutOnConfigChange: true gives hash %s, the default %s", explicit, baseHash)
	}

	get := func(objs []client.Object, key string) client.Object {
		for _, o := range objs {
			if depKind(o)+"/"+o.GetName() == key {
				return o
			}
		}
		panic(key)
	}
	tests := []struct {
		name    string
		change  func(objs []client.Object)
		changes bool
	}{{
		name: "a ConfigMap's data value changes",
		change: func(objs []client.Object) {
			get(objs, "ConfigMap/web-config").(*corev1.ConfigMap).Data["web.yaml"] = "port: 9090\n"
		},
		changes: true,
	}, {
		name:    "a ConfigMap gets a key",
		change:  func(objs []client.Object) { get(objs, "ConfigMap/web-config").(*corev1.ConfigMap).Data["new"] = "" },
		changes: true,
	}, {
		name: "a ConfigMap's binaryData changes",
		change: func(objs []client.Object) {
			get(objs, "ConfigMap/web-config").(*corev1.ConfigMap).BinaryData["logo.png"] = []byte{0}
		},
		changes: true,
	}, {
		name: "a Secret's data changes",
		change: func(objs []client.Object) {
			get(objs, "Secret/db").(*corev1.Secret).Data["password"] = []byte("rotated")
		},
		changes: true,
	}, {
		name: "the image pull secret's data changes",
		change: func(objs []client.Object) {
			get(objs, "Secret/regcred").(*corev1.Secret).Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"r":{}}}`)
		},
		changes: true,
	}, {
		name: "a value moves from one key to another",
		change: func(objs []client.Object) {
			s := get(objs, "Secret/db").(*corev1.Secret)
			s.Data = map[string][]byte{"passwd": s.Data["password"]}
		},
		changes: true,
	}, {
		name: "only the ServiceAccount changes",
		change: func(objs []client.Object) {
			sa := get(objs, "ServiceAccount/web-sa").(*corev1.ServiceAccount)
			sa.ResourceVersion = "999"
			sa.AutomountServiceAccountToken = ptr.To(true)
			sa.ImagePullSecrets = nil
			sa.Labels["team"] = "other"
		},
	}, {
		name: "only resourceVersions change",
		change: func(objs []client.Object) {
			for _, o := range objs {
				o.SetResourceVersion(o.GetResourceVersion() + "0")
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := depsObjects()
			tt.change(objs)
			got, ok := configHash(t, mustWork(t, baseApp(), "eu-1", newFakeDeps(objs...)))
			if !ok {
				t.Fatalf("no %s", flotillav1.AnnotationConfigHash)
			}
			if changed := got != baseHash; changed != tt.changes {
				t.Errorf("hash %s, base %s: changed = %t, want %t", got, baseHash, changed, tt.changes)
			}
		})
	}

	t.Run("rolloutOnConfigChange false: no hash, the dependencies still travel", func(t *testing.T) {
		w := mustWork(t, baseApp(func(a *flotillav1.MyApp) { a.Spec.RolloutOnConfigChange = ptr.To(false) }), "eu-1", newFakeDeps(depsObjects()...))
		if h, ok := configHash(t, w); ok {
			t.Errorf("pod template has %s=%s with rolloutOnConfigChange false", flotillav1.AnnotationConfigHash, h)
		}
		want := []string{"ConfigMap/web-config", "Secret/db", "Secret/regcred", "ServiceAccount/web-sa", "Deployment/web"}
		if got := manifestKeys(decodeManifests(t, w)); !slices.Equal(got, want) {
			t.Errorf("manifests %v, want %v", got, want)
		}
		if d := workDeployment(t, w); !maps.Equal(d.Spec.Template.Annotations, map[string]string{"prometheus.io/scrape": "true"}) {
			t.Errorf("pod annotations = %v, want the template's", d.Spec.Template.Annotations)
		}
	})

	t.Run("no ConfigMaps or Secrets: no hash", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			spec corev1.PodSpec
		}{
			{"a ServiceAccount only", corev1.PodSpec{ServiceAccountName: "web-sa"}},
			{"no references at all", corev1.PodSpec{}},
		} {
			w := mustWork(t, newApp(withPodSpec(tc.spec)), "eu-1", newFakeDeps(depsObjects()...))
			if h, ok := configHash(t, w); ok {
				t.Errorf("%s: pod template has %s=%s", tc.name, flotillav1.AnnotationConfigHash, h)
			}
			if d := workDeployment(t, w); d.Spec.Template.Annotations != nil {
				t.Errorf("%s: pod annotations = %v, want none", tc.name, d.Spec.Template.Annotations)
			}
		}
	})

	t.Run("the legacy template without spec: no references, no hash, no lookups", func(t *testing.T) {
		src := newFakeDeps(depsObjects()...)
		w := mustWork(t, newApp(), "eu-1", src)
		if h, ok := configHash(t, w); ok {
			t.Errorf("pod template has %s=%s", flotillav1.AnnotationConfigHash, h)
		}
		if len(w.Spec.Manifests) != 1 || len(src.calls) != 0 {
			t.Errorf("%d manifests, lookups %v; want the Deployment only and no lookups", len(w.Spec.Manifests), src.calls)
		}
	})
}

func TestDependencyMissing(t *testing.T) {
	spec := depsPodSpec()
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "maybe"}, Optional: ptr.To(true),
	}}}
	app := newApp(withPodSpec(spec), func(a *flotillav1.MyApp) { a.Spec.TargetNamespace = "prod" })
	const sp = "spec.template.spec."
	without := func(keys ...string) *fakeDeps {
		src := newFakeDeps(depsObjects()...)
		for _, k := range keys {
			delete(src.objs, k)
		}
		return src
	}

	tests := []struct {
		name        string
		src         *fakeDeps
		wantMissing []DependencyRef // nil: no error
		wantMsg     []string
		wantKeys    []string
	}{{
		name: "two missing required refs are named, with their fields and the hub namespace",
		src:  without("ConfigMap/web-config", "Secret/db"),
		wantMissing: []DependencyRef{
			{Kind: KindConfigMap, Name: "web-config", Field: sp + "volumes[0].configMap.name"},
			{Kind: KindSecret, Name: "db", Field: sp + "containers[0].env[0].valueFrom.secretKeyRef.name"},
		},
		wantMsg: []string{
			"MyApp shop/web", `ConfigMap "web-config"`, sp + "volumes[0].configMap.name",
			`Secret "db"`, sp + "containers[0].env[0].valueFrom.secretKeyRef.name", "do not exist", "hub namespace shop",
		},
	}, {
		name:        "a missing ServiceAccount",
		src:         without("ServiceAccount/web-sa"),
		wantMissing: []DependencyRef{{Kind: KindServiceAccount, Name: "web-sa", Field: sp + "serviceAccountName"}},
		wantMsg:     []string{`ServiceAccount "web-sa" (` + sp + `serviceAccountName)`, "does not exist", "hub namespace shop"},
	}, {
		name:     "a missing optional ref is skipped",
		src:      without(),
		wantKeys: []string{"ConfigMap/web-config", "Secret/db", "Secret/regcred", "ServiceAccount/web-sa", "Deployment/web"},
	}, {
		name: "an optional ref that exists travels",
		src: func() *fakeDeps {
			s := without()
			s.put(hubSecret("maybe", "300", corev1.SecretTypeOpaque, map[string][]byte{"x": []byte("y")}))
			return s
		}(),
		wantKeys: []string{"ConfigMap/web-config", "Secret/db", "Secret/maybe", "Secret/regcred", "ServiceAccount/web-sa", "Deployment/web"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _, err := Work(app, "eu-1", member("eu-1", "", nil), 2, "", tt.src)
			if tt.wantMissing == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := manifestKeys(decodeManifests(t, w)); !slices.Equal(got, tt.wantKeys) {
					t.Errorf("manifests %v, want %v", got, tt.wantKeys)
				}
				return
			}
			var missing *DependencyMissingError
			if !errors.As(err, &missing) {
				t.Fatalf("error = %v (%T), want a *DependencyMissingError", err, err)
			}
			if w != nil {
				t.Error("a Work rendered beside the error")
			}
			if missing.App != "shop/web" || missing.Namespace != "shop" {
				t.Errorf("App %q Namespace %q, want shop/web and the hub namespace shop (not the target namespace)", missing.App, missing.Namespace)
			}
			if !slices.Equal(missing.Missing, tt.wantMissing) {
				t.Errorf("Missing =\n%s\nwant\n%s", refsString(missing.Missing), refsString(tt.wantMissing))
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "maybe") {
				t.Errorf("error %q names the optional Secret", err)
			}
		})
	}

	t.Run("a failing source is an error, not a missing dependency", func(t *testing.T) {
		boom := errors.New("boom")
		src := newFakeDeps()
		src.err = boom
		_, _, err := Work(app, "eu-1", member("eu-1", "", nil), 2, "", src)
		var missing *DependencyMissingError
		if !errors.Is(err, boom) || errors.As(err, &missing) || !strings.Contains(err.Error(), "hub namespace shop") {
			t.Errorf("error = %v, want one wrapping the source's and naming the hub namespace", err)
		}
	})
}

func TestServiceAccountTokenSecretRefused(t *testing.T) {
	spec := depsPodSpec()
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-sa-token"}}})
	for _, tc := range []struct {
		name     string
		optional bool
	}{{"a required reference", false}, {"an optional reference", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec.DeepCopy()
			if tc.optional {
				s.Volumes[1].Secret.Optional = ptr.To(true)
			}
			tok := hubSecret("web-sa-token", "400", corev1.SecretTypeServiceAccountToken, map[string][]byte{"token": []byte("hub-credential")})
			src := newFakeDeps(append(depsObjects(), tok)...)
			w, _, err := Work(newApp(withPodSpec(*s)), "eu-1", member("eu-1", "", nil), 2, "", src)
			if err == nil {
				t.Fatalf("a hub service account token was rendered into the Work (%d manifests)", len(w.Spec.Manifests))
			}
			for _, want := range []string{"service account token", "web-sa-token", "spec.template.spec.volumes[1].secret.secretName"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "hub-credential") {
				t.Errorf("the error shows the token: %q", err)
			}
		})
	}
}

func TestNilDependencySourceRendersNoDependencies(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  *flotillav1.MyApp
	}{
		{"a template with references", newApp(withPodSpec(depsPodSpec()))},
		{"references and rolloutOnConfigChange true", newApp(withPodSpec(depsPodSpec()), func(a *flotillav1.MyApp) { a.Spec.RolloutOnConfigChange = ptr.To(true) })},
		{"the legacy template", newApp()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := mustWork(t, tc.app, "eu-1", nil)
			if got := manifestKeys(decodeManifests(t, w)); !slices.Equal(got, []string{"Deployment/web"}) {
				t.Errorf("manifests %v, want the Deployment only", got)
			}
			if h, ok := configHash(t, w); ok {
				t.Errorf("pod template has %s=%s without a dependency source", flotillav1.AnnotationConfigHash, h)
			}
		})
	}
}

func TestWorkSizeCountsDependencies(t *testing.T) {
	const limit = 16 << 10
	app := newApp(withPodSpec(depsPodSpec()))
	objs := depsObjects()
	objs[0].(*corev1.ConfigMap).Data["big"] = strings.Repeat("x", 4*limit)

	without := mustWork(t, app, "eu-1", nil)
	if err := CheckWorkSize(app, without, limit); err != nil {
		t.Fatalf("the Work without dependencies is over %d bytes: %v", limit, err)
	}
	with := mustWork(t, app, "eu-1", newFakeDeps(objs...))
	if WorkBytes(with) < WorkBytes(without)+4*limit {
		t.Errorf("WorkBytes with the big ConfigMap = %d, without = %d: the ConfigMap's %d bytes are not counted", WorkBytes(with), WorkBytes(without), 4*limit)
	}
	err := CheckWorkSize(app, with, limit)
	var tooLarge *WorkTooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("CheckWorkSize = %v, want a *WorkTooLargeError", err)
	}
	if tooLarge.Bytes != WorkBytes(with) || tooLarge.Limit != limit || tooLarge.App != "shop/web" || tooLarge.Cluster != "eu-1" {
		t.Errorf("error %+v, want %d bytes, limit %d, app shop/web, cluster eu-1", tooLarge, WorkBytes(with), limit)
	}
	if err := CheckWorkSize(app, with, 0); err != nil {
		t.Errorf("under the default limit: %v", err)
	}
}
