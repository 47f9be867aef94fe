package webhook

import (
	"bytes"
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

// The hub may read and patch its own two webhook configurations, named in
// resourceNames, and no others. RBAC cannot limit create to a name (the
// object does not exist yet when create is authorized), so the hub has no
// create at all: deploy/hub/webhook.yaml ships the configurations and the
// hub only keeps their caBundle current (InjectCABundle).
//
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;update;patch,resourceNames=flotilla-hub

// Register creates or updates the mutating and validating webhook
// configurations that make the hub apiserver call the webhook at baseURL
// (e.g. https://127.0.0.1:9444), trusting caBundle. The testbed and the
// local demo use it, since the hub there is a process outside any cluster
// network run with an admin kubeconfig; in a cluster, deploy/hub's
// manifests create the configurations (pointing at the Service) and the
// shipped RBAC does not let the hub create them, so it uses InjectCABundle.
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

// InjectCABundle sets caBundle in every webhook of the hub's two webhook
// configurations (named ConfigurationName) that does not carry it yet, with
// a patch that fails on a concurrent change, and writes nothing when both
// are current. It never creates a configuration: one that is missing is an
// error telling the reader to apply deploy/hub/webhook.yaml. It needs only
// get and patch on the two names, which is all the shipped RBAC grants.
func InjectCABundle(ctx context.Context, c client.Client, caBundle []byte) error {
	if len(caBundle) == 0 {
		return fmt.Errorf("injecting the webhook CA bundle: the CA bundle is empty")
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: ConfigurationName}, mutating); err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s (apply deploy/hub/webhook.yaml; the hub does not create it): %w", ConfigurationName, err)
	}
	configs := make([]*admissionregistrationv1.WebhookClientConfig, 0, len(mutating.Webhooks))
	for i := range mutating.Webhooks {
		configs = append(configs, &mutating.Webhooks[i].ClientConfig)
	}
	before := mutating.DeepCopy()
	if SetCABundle(configs, caBundle) {
		if err := c.Patch(ctx, mutating, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("patching the caBundle of MutatingWebhookConfiguration %s: %w", ConfigurationName, err)
		}
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: ConfigurationName}, validating); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s (apply deploy/hub/webhook.yaml; the hub does not create it): %w", ConfigurationName, err)
	}
	configs = configs[:0]
	for i := range validating.Webhooks {
		configs = append(configs, &validating.Webhooks[i].ClientConfig)
	}
	vbefore := validating.DeepCopy()
	if SetCABundle(configs, caBundle) {
		if err := c.Patch(ctx, validating, client.MergeFromWithOptions(vbefore, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("patching the caBundle of ValidatingWebhookConfiguration %s: %w", ConfigurationName, err)
		}
	}
	return nil
}

// SetCABundle sets caBundle in each of configs that holds another one and
// reports whether it changed any, so that a caller writes only when
// something is out of date.
func SetCABundle(configs []*admissionregistrationv1.WebhookClientConfig, caBundle []byte) bool {
	changed := false
	for _, cc := range configs {
		if !bytes.Equal(cc.CABundle, caBundle) {
			cc.CABundle = bytes.Clone(caBundle)
			changed = true
		}
	}
	return changed
}
