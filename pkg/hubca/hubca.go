package hubca

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// Validity is the lifetime of a CA Ensure creates. Agents pin the CA, so
// it lives long; its leaves are short-lived and rotated.
const Validity = 10 * 365 * 24 * time.Hour

// Ensure returns the hub CA from the Secret flotilla-hub-ca in namespace,
// creating the Secret with a new CA the first time (and the namespace when
// it is missing). reader must not be a cache. An unreadable Secret is an
// error naming it, never replaced: agents pinned the CA inside.
func Ensure(ctx context.Context, reader client.Reader, writer client.Client, namespace string) (*pki.KeyPair, error) {
	key := client.ObjectKey{Namespace: namespace, Name: flotillav1.HubCASecretName}
	secret := &corev1.Secret{}
	err := reader.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		ca, err := pki.NewCA("flotilla-hub-ca", Validity)
		if err != nil {
			return nil, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.HubCASecretName,
				Labels: map[string]string{"app.kubernetes.io/part-of": "flotilla"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM(), corev1.TLSPrivateKeyKey: keyPEM},
		}
		err = writer.Create(ctx, secret)
		if apierrors.IsNotFound(err) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
			if err := writer.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("creating namespace %s for the hub CA: %w", namespace, err)
			}
			err = writer.Create(ctx, secret)
		}
		if err == nil {
			return ca, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the hub CA Secret %s: %w", key, err)
		}
		// Another replica, or `kubectl flotilla init`, was first.
		secret = &corev1.Secret{}
		err = reader.Get(ctx, key, secret)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the hub CA Secret %s: %w", key, err)
	}
	return FromSecret(secret)
}

// FromSecret parses the CA in a flotilla-hub-ca Secret.
func FromSecret(s *corev1.Secret) (*pki.KeyPair, error) {
	kp, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("the hub CA Secret %s/%s: %w (agents pinned this CA: restore the Secret rather than delete it)", s.Namespace, s.Name, err)
	}
	if !kp.Cert.IsCA {
		return nil, fmt.Errorf("the hub CA Secret %s/%s: tls.crt is not a CA certificate", s.Namespace, s.Name)
	}
	return kp, nil
}
