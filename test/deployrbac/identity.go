package deployrbac

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountToken creates namespace and service account
// namespace/name when missing and returns a token for it from the
// TokenRequest API, valid for an hour.
func ServiceAccountToken(ctx context.Context, admin *rest.Config, namespace, name string) (string, error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	seconds := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountConfig is admin's apiserver, trusted the same way, but
// authenticated as service account namespace/name (created when missing)
// instead of admin's client certificate.
func ServiceAccountConfig(ctx context.Context, admin *rest.Config, namespace, name string) (*rest.Config, error) {
	token, err := ServiceAccountToken(ctx, admin, namespace, name)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token
	return cfg, nil
}

// ServiceAccountUser is the user name the apiserver gives service account
// namespace/name, and its groups.
func ServiceAccountUser(namespace, name string) (string, []string) {
	return "system:serviceaccount:" + namespace + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// Allowed asks the apiserver (as admin, with c) whether service account
// namespace/name may do what attrs say, through a SubjectAccessReview:
// the apiserver's RBAC authorizer answers from the roles and bindings it
// holds, so this is the decision a real request would get.
func Allowed(ctx context.Context, c client.Client, namespace, name string, attrs *authorizationv1.ResourceAttributes, nonResource *authorizationv1.NonResourceAttributes) (bool, error) {
	user, groups := ServiceAccountUser(namespace, name)
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, ResourceAttributes: attrs, NonResourceAttributes: nonResource,
	}}
	if err := c.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("reviewing access of %s: %w", user, err)
	}
	return sar.Status.Allowed, nil
}
