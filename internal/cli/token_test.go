package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
)

// TestTokens creates, lists and deletes tokens on a real apiserver,
// through the commands a user runs: the list never shows a secret, a
// delete names what it could not delete and leaves the others, and a
// Secret that is not a token is never deleted as one.
func TestTokens(t *testing.T) {
	c := hubEnv.client(t)
	ctx := context.Background()
	const ns = "token-test"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	kc := hubEnv.kubeconfig(t)
	flags := []string{"--kubeconfig", kc, "--flotilla-namespace", ns}

	out, err := run(t, append(flags, "token", "create", "--ttl", "1h", "--auto-accept", "--labels", "env=prod,tier=web", "--description", "for the prod members")...)
	if err != nil {
		t.Fatal(err)
	}
	multi, err := bootstrap.ParseToken(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("token create printed %q: %v", out, err)
	}
	single, err := CreateToken(ctx, c, ns, bootstrap.Options{SingleUse: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expired, err := CreateToken(ctx, c, ns, bootstrap.Options{TTL: time.Minute}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bootstrap.SecretName(multi.ID)}, s); err != nil {
		t.Fatal(err)
	}
	info, err := bootstrap.Check(s, multi, "m1", time.Now())
	if err != nil {
		t.Fatalf("the created token does not check: %v", err)
	}
	if !info.AutoAccept || info.Labels["tier"] != "web" || info.Expiration == nil {
		t.Errorf("token %s: %+v, want auto-accept, labels and an expiry", multi.ID, info)
	}

	for _, o := range []string{"", "wide", "json", "yaml"} {
		args := append(flags, "token", "list")
		if o != "" {
			args = append(args, "-o", o)
		}
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("token list -o %s: %v", o, err)
		}
		for _, tok := range []bootstrap.Token{multi, single, expired} {
			if !strings.Contains(out, tok.ID) {
				t.Errorf("token list -o %s does not show %s:\n%s", o, tok.ID, out)
			}
			if strings.Contains(out, tok.Secret) {
				t.Errorf("token list -o %s shows the secret of %s", o, tok.ID)
			}
		}
		if o == "json" {
			var views []TokenView
			if err := json.Unmarshal([]byte(out), &views); err != nil {
				t.Fatalf("token list -o json: %v", err)
			}
			states := map[string]string{}
			for _, v := range views {
				states[v.ID] = v.State
			}
			if states[multi.ID] != TokenValid || states[expired.ID] != TokenExpired {
				t.Errorf("states %v: want %s valid and %s expired", states, multi.ID, expired.ID)
			}
		}
	}

	// A Secret named like a token that is not one is left alone.
	impostor := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: bootstrap.SecretName("zzzzzz")}, StringData: map[string]string{"a": "b"}}
	if err := c.Create(ctx, impostor); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, append(flags, "token", "delete", single.ID, "nope00", "BAD", "zzzzzz")...)
	if err == nil {
		t.Fatal("deleting a missing, a malformed and a non-token id: no error")
	}
	for _, want := range []string{"nope00: no such token", `"BAD"`, "zzzzzz", "not a token"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(impostor), &corev1.Secret{}); err != nil {
		t.Errorf("the Secret that is no token: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bootstrap.SecretName(single.ID)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("token %s after its delete: %v, want NotFound", single.ID, err)
	}
	left, err := ListTokens(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Errorf("%d tokens left, want the 2 not deleted: %+v", len(left), left)
	}
	// A whole token names its id.
	if _, err := run(t, append(flags, "token", "delete", expired.String())...); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, append(flags, "token", "create", "--ttl", "-1h")...); err == nil || !strings.Contains(err.Error(), "--ttl") {
		t.Errorf("token create --ttl -1h: %v, want an error naming --ttl", err)
	}
	if _, err := run(t, append(flags, "token", "create", "--labels", "novalue")...); err == nil || !strings.Contains(err.Error(), "--labels") {
		t.Errorf("token create --labels novalue: %v, want an error naming --labels", err)
	}
}

// TestAcceptDeny sets acceptance on a real apiserver: a missing member is
// named in the error and does not stop the others, and members not named
// are not touched.
func TestAcceptDeny(t *testing.T) {
	c := hubEnv.client(t)
	ctx := context.Background()
	for _, n := range []string{"accept-a", "accept-b", "accept-c"} {
		mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: flotillav1.MemberClusterSpec{Acceptance: flotillav1.AcceptancePending}}
		if err := c.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
	}
	kc := hubEnv.kubeconfig(t)
	_, err := run(t, "--kubeconfig", kc, "accept", "accept-a", "accept-missing")
	if err == nil || !strings.Contains(err.Error(), "member accept-missing") {
		t.Errorf("accept of a missing member: %v, want an error naming it", err)
	}
	if _, err := run(t, "--kubeconfig", kc, "deny", "accept-b"); err != nil {
		t.Fatal(err)
	}
	want := map[string]flotillav1.Acceptance{"accept-a": flotillav1.AcceptanceAccepted, "accept-b": flotillav1.AcceptanceDenied, "accept-c": flotillav1.AcceptancePending}
	for n, a := range want {
		mc := &flotillav1.MemberCluster{}
		if err := c.Get(ctx, client.ObjectKey{Name: n}, mc); err != nil {
			t.Fatal(err)
		}
		if mc.Spec.Acceptance != a {
			t.Errorf("%s: acceptance %s, want %s", n, mc.Spec.Acceptance, a)
		}
	}
	if err := SetAcceptance(ctx, c, flotillav1.AcceptanceAccepted, []string{"accept-b"}); err != nil {
		t.Fatal(err)
	}
	mc := &flotillav1.MemberCluster{}
	if err := c.Get(ctx, client.ObjectKey{Name: "accept-b"}, mc); err != nil || !mc.IsAccepted() {
		t.Errorf("accept after deny: %v, accepted %t", err, mc.IsAccepted())
	}
}

// TestTokenJoinOutputs prints, with a new token, the join command and the
// agent chart's values, pinned to the hub CA in the cluster; without a hub
// address or a CA it refuses, naming the flag, and creates no token.
func TestTokenJoinOutputs(t *testing.T) {
	c := hubEnv.client(t)
	ctx := context.Background()
	const ns = "token-join-test"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--kubeconfig", hubEnv.kubeconfig(t), "--flotilla-namespace", ns}
	tokens := func() int {
		list := &corev1.SecretList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range list.Items {
			if string(s.Type) == flotillav1.BootstrapTokenSecretType {
				n++
			}
		}
		return n
	}

	// No CA yet: refused before a token is made.
	out, err := run(t, append(flags, "token", "create", "--helm-values", "--hub-address", "hub.example.com:9443")...)
	if err == nil || !strings.Contains(err.Error(), "--ca-secret") {
		t.Fatalf("--helm-values without a hub CA: %v (output %q), want an error naming --ca-secret", err, out)
	}
	if _, err := run(t, append(flags, "token", "create", "--print-join-command")...); err == nil || !strings.Contains(err.Error(), "--hub-address") {
		t.Fatalf("--print-join-command without --hub-address: %v, want an error naming --hub-address", err)
	}
	if _, err := run(t, append(flags, "token", "create", "--print-join-command", "--hub-address", "no-port")...); err == nil || !strings.Contains(err.Error(), "--hub-address") {
		t.Fatalf("--hub-address without a port: %v, want an error naming --hub-address", err)
	}
	if n := tokens(); n != 0 {
		t.Fatalf("%d tokens were created by refused commands", n)
	}

	ca, err := hubca.Ensure(ctx, c, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	want := bootstrap.CAHash(ca.Cert)
	out, err = run(t, append(flags, "token", "create", "--print-join-command", "--hub-address", "hub.example.com:9443")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "kubectl flotilla join --hub hub.example.com:9443 --token ") || !strings.Contains(out, "--ca-hash "+want+" ") {
		t.Errorf("join command %q, want one for hub.example.com:9443 pinned to %s", out, want)
	}

	out, err = run(t, append(flags, "token", "create", "--helm-values", "--hub-address", "hub.example.com:9443", "--auto-accept")...)
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		HubAddress   string `json:"hubAddress"`
		Certificates struct {
			Mode string `json:"mode"`
			Join struct {
				Token  string `json:"token"`
				CAHash string `json:"caHash"`
			} `json:"join"`
		} `json:"certificates"`
	}
	if err := yaml.UnmarshalStrict([]byte(out), &values); err != nil {
		t.Fatalf("--helm-values printed what is not the values it should be: %v\n%s", err, out)
	}
	if values.HubAddress != "hub.example.com:9443" || values.Certificates.Mode != "join" || values.Certificates.Join.CAHash != want {
		t.Errorf("values %+v, want hubAddress hub.example.com:9443, mode join, caHash %s", values, want)
	}
	tok, err := bootstrap.ParseToken(values.Certificates.Join.Token)
	if err != nil {
		t.Fatalf("values' token %q: %v", values.Certificates.Join.Token, err)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bootstrap.SecretName(tok.ID)}, s); err != nil {
		t.Fatalf("the token of the values is not on the hub: %v", err)
	}
	if info, err := bootstrap.Check(s, tok, "m1", time.Now()); err != nil || !info.AutoAccept {
		t.Errorf("the values' token checks as %+v, %v; want a valid auto-accepting token", info, err)
	}

	// A provided CA (ca.crt of the hub's certificate Secret) is pinned too.
	provided := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flotilla-hub-certs"}, Data: map[string][]byte{"ca.crt": ca.CertPEM()}}
	if err := c.Create(ctx, provided); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, append(flags, "token", "create", "--print-join-command", "--hub-address", "hub.example.com:9443", "--ca-secret", "flotilla-hub-certs")...)
	if err != nil || !strings.Contains(out, "--ca-hash "+want+" ") {
		t.Errorf("with --ca-secret flotilla-hub-certs: %q, %v; want the join command pinned to %s", out, err, want)
	}
}
