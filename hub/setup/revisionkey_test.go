package setup

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestEnsureRevisionKey checks the revision key against a real apiserver:
// created once (with its namespace) as a Secret, the same on every later
// call, and a short key in the Secret is refused with a message that says
// what to do.
func TestEnsureRevisionKey(t *testing.T) {
	c, err := client.New(sharedEnv.Config(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "revision-key-test"
	first, err := EnsureRevisionKey(ctx, c, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 32 || bytes.Equal(first, make([]byte, 32)) {
		t.Fatalf("revision key %x: want 32 random bytes", first)
	}
	again, err := EnsureRevisionKey(ctx, c, c, ns)
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("second call = %x, %v; want the first key %x", again, err, first)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: RevisionKeySecretName}, secret); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret.Data[RevisionKeyField], first) {
		t.Errorf("the Secret holds %x, want the key returned, %x", secret.Data[RevisionKeyField], first)
	}
	secret.Data[RevisionKeyField] = []byte("short")
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	_, err = EnsureRevisionKey(ctx, c, c, ns)
	if err == nil || !strings.Contains(err.Error(), "delete the Secret") {
		t.Fatalf("a 5-byte key: error %v, want one saying the key is too short and what to do", err)
	}
}
