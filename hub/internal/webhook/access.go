package webhook

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
)

// resourceOf is the resource a dependency kind is read through.
var resourceOf = map[string]string{
	render.KindConfigMap:      "configmaps",
	render.KindSecret:         "secrets",
	render.KindServiceAccount: "serviceaccounts",
}

// validateDependencyAccess refuses the dependencies app's pod template
// names that the requesting user may not read in app's namespace. The hub
// reads every namespace's Secrets to copy them to members: without this
// check, a tenant allowed to create MyApps but not to read a Secret of
// its namespace could have the hub copy it into a member namespace the
// tenant can read. Only dependencies old (nil on create) does not name
// yet are checked, so an update by someone else (a scale, the hub's
// finalizer) is not refused for what its author never added. A failed
// review is an error, which refuses the request: admission fails closed.
func (w *MyAppWebhook) validateDependencyAccess(ctx context.Context, old, app *flotillav1.MyApp) (field.ErrorList, error) {
	if w.Authorizer == nil {
		return nil, nil
	}
	had := map[string]bool{}
	if old != nil {
		for _, r := range render.AppDependencyRefs(old) {
			had[r.Kind+"/"+r.Name] = true
		}
	}
	refs := render.AppDependencyRefs(app)
	var user authenticationv1.UserInfo
	asked := false
	var errs field.ErrorList
	for _, r := range refs {
		if had[r.Kind+"/"+r.Name] {
			continue
		}
		if !asked {
			req, err := admission.RequestFromContext(ctx)
			if err != nil {
				return nil, fmt.Errorf("checking who may read the app's dependencies: %w", err)
			}
			user, asked = req.UserInfo, true
		}
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: app.Namespace, Verb: "get", Resource: resourceOf[r.Kind], Name: r.Name,
			},
		}}
		if err := w.Authorizer.Create(ctx, sar); err != nil {
			return nil, fmt.Errorf("asking whether %s may get %s %s/%s: %w", user.Username, r.Kind, app.Namespace, r.Name, err)
		}
		if !sar.Status.Allowed {
			errs = append(errs, field.Forbidden(field.NewPath(r.Field), fmt.Sprintf(
				"%s may not get %s %q in namespace %s, and the hub would copy it to the members: ask for read access to it, or use one you can read",
				user.Username, r.Kind, r.Name, app.Namespace)))
		}
	}
	return errs, nil
}
