package ssacr

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"app": "web"}, UID: "u1"},
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

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyConfiguration(t *testing.T) {
	ac, err := ApplyConfiguration(deployment())
	if err != nil {
		t.Fatal(err)
	}
	// The apply configuration encodes as its body (no status, no null
	// creation times): that is what Client.Apply sends.
	want := `{"apiVersion":"apps/v1","kind":"Deployment",` +
		`"metadata":{"labels":{"app":"web"},"name":"web","namespace":"shop","uid":"u1"},` +
		`"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"strategy":{},` +
		`"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"web:1","name":"app","resources":{}}]}}}}`
	if got := toJSON(t, ac); got != want {
		t.Errorf("ApplyConfiguration encodes as\n%s\nwant\n%s", got, want)
	}

	ac, err = StatusApplyConfiguration(deployment(), []string{"metadata", "uid"})
	if err != nil {
		t.Fatal(err)
	}
	want = `{"apiVersion":"apps/v1","kind":"Deployment",` +
		`"metadata":{"labels":{"app":"web"},"name":"web","namespace":"shop"},"status":{"readyReplicas":1,"replicas":2}}`
	if got := toJSON(t, ac); got != want {
		t.Errorf("StatusApplyConfiguration encodes as\n%s\nwant\n%s", got, want)
	}
}

func TestApplyConfigurationReportsWhatCannotConvert(t *testing.T) {
	var nilDeployment *appsv1.Deployment
	if _, err := ApplyConfiguration(nilDeployment); err == nil {
		t.Error("ApplyConfiguration of a nil object: no error")
	}
	if _, err := StatusApplyConfiguration(nilDeployment); err == nil {
		t.Error("StatusApplyConfiguration of a nil object: no error")
	}
}
