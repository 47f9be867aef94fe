package render

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The kinds of dependency a pod template can name.
const (
	KindConfigMap      = "ConfigMap"
	KindSecret         = "Secret"
	KindServiceAccount = "ServiceAccount"
)

// DependencyRef is an object of the MyApp's hub namespace that its pods
// use.
type DependencyRef struct {
	// Kind is KindConfigMap, KindSecret or KindServiceAccount.
	Kind string
	Name string
	// Optional is true when every reference to it says optional: true; the
	// pods then start without it, so a missing one is no error.
	Optional bool
	// Field is the first field that names it, for messages.
	Field string
}

func (r DependencyRef) String() string { return r.Kind + " " + r.Name }

// DependencyRefs lists, sorted by kind and name, the ConfigMaps, Secrets
// and ServiceAccount the pod template spec refers to: environment
// variables (valueFrom, envFrom) of every container and init container,
// configMap, secret, projected and CSI volumes, imagePullSecrets and
// serviceAccountName (but not "default", which every namespace has). A
// ServiceAccount's own imagePullSecrets are not followed.
func DependencyRefs(spec *corev1.PodSpec) []DependencyRef {
	byKey := map[string]*DependencyRef{}
	add := func(kind, name string, optional *bool, f *field.Path) {
		if name == "" {
			return
		}
		opt := optional != nil && *optional
		key := kind + "/" + name
		if r, ok := byKey[key]; ok {
			r.Optional = r.Optional && opt
			return
		}
		byKey[key] = &DependencyRef{Kind: kind, Name: name, Optional: opt, Field: f.String()}
	}
	sp := field.NewPath("spec", "template", "spec")
	containers := func(list []corev1.Container, p *field.Path) {
		for i := range list {
			c := &list[i]
			cp := p.Index(i)
			for j, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				ep := cp.Child("env").Index(j).Child("valueFrom")
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					add(KindConfigMap, r.Name, r.Optional, ep.Child("configMapKeyRef", "name"))
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					add(KindSecret, r.Name, r.Optional, ep.Child("secretKeyRef", "name"))
				}
			}
			for j, e := range c.EnvFrom {
				ep := cp.Child("envFrom").Index(j)
				if r := e.ConfigMapRef; r != nil {
					add(KindConfigMap, r.Name, r.Optional, ep.Child("configMapRef", "name"))
				}
				if r := e.SecretRef; r != nil {
					add(KindSecret, r.Name, r.Optional, ep.Child("secretRef", "name"))
				}
			}
		}
	}
	containers(spec.InitContainers, sp.Child("initContainers"))
	containers(spec.Containers, sp.Child("containers"))
	for i, v := range spec.Volumes {
		vp := sp.Child("volumes").Index(i)
		if s := v.ConfigMap; s != nil {
			add(KindConfigMap, s.Name, s.Optional, vp.Child("configMap", "name"))
		}
		if s := v.Secret; s != nil {
			add(KindSecret, s.SecretName, s.Optional, vp.Child("secret", "secretName"))
		}
		if s := v.CSI; s != nil && s.NodePublishSecretRef != nil {
			add(KindSecret, s.NodePublishSecretRef.Name, nil, vp.Child("csi", "nodePublishSecretRef", "name"))
		}
		if s := v.Projected; s != nil {
			for j, src := range s.Sources {
				pp := vp.Child("projected", "sources").Index(j)
				if c := src.ConfigMap; c != nil {
					add(KindConfigMap, c.Name, c.Optional, pp.Child("configMap", "name"))
				}
				if c := src.Secret; c != nil {
					add(KindSecret, c.Name, c.Optional, pp.Child("secret", "name"))
				}
			}
		}
	}
	for i, s := range spec.ImagePullSecrets {
		add(KindSecret, s.Name, nil, sp.Child("imagePullSecrets").Index(i).Child("name"))
	}
	sa, saField := spec.ServiceAccountName, sp.Child("serviceAccountName")
	if sa == "" {
		sa, saField = spec.DeprecatedServiceAccount, sp.Child("serviceAccount")
	}
	if sa != "default" {
		add(KindServiceAccount, sa, nil, saField)
	}
	out := make([]DependencyRef, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b DependencyRef) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// AppDependencyRefs are the dependencies app's pods may name in any
// cluster: those of its pod template and those an override's JSON patches
// add (named by the override's patches field).
func AppDependencyRefs(app *flotillav1.MyApp) []DependencyRef {
	base, err := Deployment(app, 1, ClusterOverrides{})
	if err != nil {
		return nil
	}
	refs := DependencyRefs(&base.Spec.Template.Spec)
	seen := map[string]bool{}
	for _, r := range refs {
		seen[r.Kind+"/"+r.Name] = true
	}
	for i, o := range app.Spec.Overrides {
		if len(o.Patches) == 0 {
			continue
		}
		patched, err := Patch(base, o.Patches)
		if err != nil {
			continue // refused by validateOverrides, naming the patch
		}
		for _, r := range DependencyRefs(&patched.Spec.Template.Spec) {
			if k := r.Kind + "/" + r.Name; !seen[k] {
				seen[k] = true
				r.Field = field.NewPath("spec", "overrides").Index(i).Child("patches").String()
				refs = append(refs, r)
			}
		}
	}
	return refs
}

// DependencySource gives render the hub objects a MyApp's pods use, from
// the MyApp's namespace.
type DependencySource interface {
	// Dependency returns the object of kind (a DependencyRef kind) and
	// name, a *corev1.ConfigMap, *corev1.Secret or *corev1.ServiceAccount,
	// or nil when it does not exist. The caller does not change it.
	Dependency(kind, name string) (client.Object, error)
}

// DependencyMissingError says that objects a MyApp's pods need are not in
// its hub namespace.
type DependencyMissingError struct {
	App       string // namespace/name of the MyApp
	Namespace string // the hub namespace looked in
	Missing   []DependencyRef
}

func (e *DependencyMissingError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, r := range e.Missing {
		parts[i] = fmt.Sprintf("%s %q (%s)", r.Kind, r.Name, r.Field)
	}
	verb := "does"
	if len(parts) > 1 {
		verb = "do"
	}
	return fmt.Sprintf("MyApp %s needs %s, which %s not exist in hub namespace %s; create it there (or mark the reference optional)",
		e.App, strings.Join(parts, ", "), verb, e.Namespace)
}

// dependencies renders the copies of the objects d's pod template uses
// (from src, which holds the hub objects of app's namespace) into
// namespace, in the order of DependencyRefs, and the hash of the
// ConfigMaps' and Secrets' content. An object missing from src that the
// pods need makes a *DependencyMissingError naming every such object.
func dependencies(app *flotillav1.MyApp, d *appsv1.Deployment, src DependencySource) ([]client.Object, string, error) {
	refs := DependencyRefs(&d.Spec.Template.Spec)
	if len(refs) == 0 || src == nil {
		return nil, "", nil
	}
	var (
		objs    []client.Object
		missing []DependencyRef
		h       = sha256.New()
		hashed  bool
	)
	for _, ref := range refs {
		obj, err := src.Dependency(ref.Kind, ref.Name)
		if err != nil {
			return nil, "", fmt.Errorf("reading %s of hub namespace %s: %w", ref, app.Namespace, err)
		}
		if obj == nil {
			if !ref.Optional {
				missing = append(missing, ref)
			}
			continue
		}
		cp, content, err := copyDependency(obj, d.Namespace)
		if err != nil {
			return nil, "", fmt.Errorf("%s (%s): %w", ref, ref.Field, err)
		}
		objs = append(objs, cp)
		if content != nil {
			// Kind and name delimit each object's content.
			fmt.Fprintf(h, "%s\x00%s\x00%d\x00", ref.Kind, ref.Name, len(content))
			h.Write(content)
			hashed = true
		}
	}
	if len(missing) > 0 {
		return nil, "", &DependencyMissingError{App: app.Namespace + "/" + app.Name, Namespace: app.Namespace, Missing: missing}
	}
	hash := ""
	if hashed {
		hash = hex.EncodeToString(h.Sum(nil)[:16])
	}
	return objs, hash, nil
}

// copyDependency is the copy of obj, a hub object, that goes into a Work
// for namespace: its name, its labels but Flotilla's, the dependency label
// and the source version, and its content; none of the hub's metadata
// (UID, owners, annotations). content is what the config hash covers (nil
// for a ServiceAccount).
func copyDependency(obj client.Object, namespace string) (client.Object, []byte, error) {
	meta := metav1.ObjectMeta{
		Name:        obj.GetName(),
		Namespace:   namespace,
		Labels:      map[string]string{},
		Annotations: map[string]string{flotillav1.AnnotationSourceVersion: obj.GetResourceVersion()},
	}
	for k, v := range obj.GetLabels() {
		if !strings.HasPrefix(k, "flotilla.dev/") {
			meta.Labels[k] = v
		}
	}
	meta.Labels[flotillav1.LabelDependency] = "true"
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: KindConfigMap},
			ObjectMeta: meta,
			Data:       maps.Clone(o.Data),
			BinaryData: maps.Clone(o.BinaryData),
			Immutable:  copyBool(o.Immutable),
		}
		content, err := json.Marshal([]any{cm.Data, cm.BinaryData})
		return cm, content, err
	case *corev1.Secret:
		if o.Type == corev1.SecretTypeServiceAccountToken {
			return nil, nil, fmt.Errorf("is a service account token of the hub (type %s); Flotilla does not copy hub credentials to members", o.Type)
		}
		s := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: KindSecret},
			ObjectMeta: meta,
			Type:       o.Type,
			Data:       maps.Clone(o.Data),
			Immutable:  copyBool(o.Immutable),
		}
		content, err := json.Marshal([]any{s.Type, s.Data})
		return s, content, err
	case *corev1.ServiceAccount:
		sa := &corev1.ServiceAccount{
			TypeMeta:                     metav1.TypeMeta{APIVersion: "v1", Kind: KindServiceAccount},
			ObjectMeta:                   meta,
			ImagePullSecrets:             slices.Clone(o.ImagePullSecrets),
			AutomountServiceAccountToken: copyBool(o.AutomountServiceAccountToken),
		}
		return sa, nil, nil
	default:
		return nil, nil, fmt.Errorf("unexpected object type %T", obj)
	}
}

func copyBool(p *bool) *bool {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
