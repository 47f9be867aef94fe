package ssa

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
			},
		},
		Status: appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 1},
	}
}

// fromJSON is the unstructured object s describes.
func fromJSON(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(s), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const deploymentBody = `{"apiVersion":"apps/v1","kind":"Deployment",` +
	`"metadata":{"labels":{"app":"web"},"name":"web","namespace":"shop"},` +
	`"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"strategy":{},` +
	`"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"web:1","name":"app","resources":{}}]}}}}`

func TestUnstructured(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
		drop []Path
		want string
	}{{
		name: "typed object: status and both creationTimestamps go",
		obj:  deployment(),
		want: deploymentBody,
	}, {
		name: "typed object with a creation time: it goes too",
		obj: func() runtime.Object {
			d := deployment()
			d.CreationTimestamp = metav1.Unix(1, 0)
			d.Spec.Template.CreationTimestamp = metav1.Unix(1, 0)
			return d
		}(),
		want: deploymentBody,
	}, {
		name: "extra paths are dropped",
		obj:  deployment(),
		drop: []Path{{"spec", "strategy"}, {"metadata", "labels"}, {"spec", "template", "spec"}},
		want: `{"apiVersion":"apps/v1","kind":"Deployment",` +
			`"metadata":{"name":"web","namespace":"shop"},` +
			`"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}}}}}`,
	}, {
		name: "paths that are absent, empty or run through a non-object are ignored",
		obj:  deployment(),
		drop: []Path{{"spec", "paused"}, {}, {"spec", "replicas", "x"}, {"nothing", "here"}},
		want: deploymentBody,
	}, {
		name: "an object without a pod template",
		obj: &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "shop"},
			Data:       map[string]string{"k": "v"},
		},
		want: `{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"c","namespace":"shop"}}`,
	}, {
		name: "a stored manifest with server-set metadata",
		obj: fromJSON(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"shop",`+
			`"uid":"u","resourceVersion":"7","generation":2,"creationTimestamp":"2030-01-01T00:00:00Z",`+
			`"deletionTimestamp":"2030-01-02T00:00:00Z","deletionGracePeriodSeconds":30,"selfLink":"/x",`+
			`"managedFields":[{"manager":"m"}],"labels":{"a":"b"}},"status":{"phase":"x"}}`),
		drop: ServerSetMetadata,
		want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"a":"b"},"name":"c","namespace":"shop"}}`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := toJSON(t, tc.obj)
			u, err := Unstructured(tc.obj, tc.drop...)
			if err != nil {
				t.Fatal(err)
			}
			if got := toJSON(t, u); got != tc.want {
				t.Errorf("Unstructured =\n%s\nwant\n%s", got, tc.want)
			}
			if after := toJSON(t, tc.obj); after != before {
				t.Errorf("Unstructured modified its input:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestStatusUnstructured(t *testing.T) {
	d := deployment()
	d.UID = types.UID("u1")
	u, err := StatusUnstructured(d)
	if err != nil {
		t.Fatal(err)
	}
	// The UID stays: a status writer sets it so that a replaced object
	// answers with a conflict.
	want := `{"apiVersion":"apps/v1","kind":"Deployment",` +
		`"metadata":{"labels":{"app":"web"},"name":"web","namespace":"shop","uid":"u1"},` +
		`"status":{"readyReplicas":1,"replicas":2}}`
	if got := toJSON(t, u); got != want {
		t.Errorf("StatusUnstructured =\n%s\nwant\n%s", got, want)
	}
	u, err = StatusUnstructured(d, Path{"metadata", "labels"})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "metadata", "labels"); found {
		t.Errorf("StatusUnstructured kept metadata.labels it was asked to drop: %s", toJSON(t, u))
	}
}

func TestUnstructuredReportsWhatCannotConvert(t *testing.T) {
	var nilDeployment *appsv1.Deployment
	if _, err := Unstructured(nilDeployment); err == nil {
		t.Error("Unstructured of a nil object: no error")
	}
}
