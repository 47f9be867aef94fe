package webhook

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// ConfigurationName names the hub's webhook configurations.
const ConfigurationName = "flotilla-hub"

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;create;update

// Register creates or updates the mutating and validating webhook
// configurations that make the hub apiserver call the webhook at baseURL
// (e.g. https://127.0.0.1:9444), trusting caBundle. The testbed and the
// local demo use it, since the hub there is a process outside any cluster
// network; in a cluster, deploy/hub's manifests point at the Service.
func Register(ctx context.Context, c client.Client, baseURL string, caBundle []byte) error {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{"flotilla.dev"},
			APIVersions: []string{"v1alpha1"},
			Resources:   []string{"myapps"},
		},
	}}
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, mutating, func() error {
		mutating.Webhooks = []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mmyapp.flotilla.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(baseURL + MutatePath), CABundle: caBundle},
			Rules:                   rules,
			SideEffects:             &none,
			FailurePolicy:           &fail,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}}
		return nil
	}); err != nil {
		return fmt.Errorf("registering the mutating webhook: %w", err)
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, validating, func() error {
		validating.Webhooks = []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vmyapp.flotilla.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(baseURL + ValidatePath), CABundle: caBundle},
			Rules:                   rules,
			SideEffects:             &none,
			FailurePolicy:           &fail,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}}
		return nil
	}); err != nil {
		return fmt.Errorf("registering the validating webhook: %w", err)
	}
	return nil
}
