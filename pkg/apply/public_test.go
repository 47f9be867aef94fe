package apply

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestRefusedKeepsTheMembersAnswerInTheMember: what the member's apiserver
// says when it refuses an object goes to the agent's log (Detail, the
// error); the hub gets its reason, code and field paths only.
func TestRefusedKeepsTheMembersAnswerInTheMember(t *testing.T) {
	id := v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "web"}
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		name     string
		err      error
		secret   string // in the member's answer; must not reach the hub
		wantPart string // in the message for the hub
	}{{
		name:     "an admission webhook names another tenant's object",
		err:      apierrors.NewForbidden(deployments, "web", errors.New(`admission webhook "policy.example.com" denied the request: image registry already used by payments/ledger-db`)),
		secret:   "payments/ledger-db",
		wantPart: "Forbidden (HTTP 403)",
	}, {
		name: "invalid: the field paths, not the values",
		err: apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", field.ErrorList{
			field.Invalid(field.NewPath("spec", "template", "spec", "containers").Index(0).Child("image"), "quota-of-team-b", "must not be empty"),
		}),
		secret:   "quota-of-team-b",
		wantPart: "Invalid (HTTP 422) at spec.template.spec.containers[0].image",
	}, {
		name:     "not an API error",
		err:      errors.New("dial tcp 10.0.0.7:443: connection refused by lb-of-team-c"),
		secret:   "lb-of-team-c",
		wantPart: "could not be reached",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := refused(id, tc.err)
			if r.Reason != v1alpha1.ReasonApplyFailed || err != tc.err {
				t.Fatalf("refused = %+v, %v; want ApplyFailed and the error itself", r, err)
			}
			if strings.Contains(r.Message, tc.secret) {
				t.Errorf("the message for the hub %q holds %q", r.Message, tc.secret)
			}
			if !strings.HasPrefix(r.Message, "Deployment shop/web: ") || !strings.Contains(r.Message, tc.wantPart) {
				t.Errorf("message %q, want it to name the object and say %q", r.Message, tc.wantPart)
			}
			if !strings.Contains(r.Detail, tc.secret) {
				t.Errorf("detail %q lost the member's answer %q", r.Detail, tc.secret)
			}
		})
	}
}
