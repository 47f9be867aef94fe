package cli

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func pushOpts() PushJoinOptions {
	return PushJoinOptions{ClusterName: "edge-1", Labels: map[string]string{"env": "prod", "tier": "edge"},
		Region: "eu-west", Zone: "eu-west-a", Provider: "onprem", Namespace: flotillav1.SystemNamespace}
}

// TestPushJoinDryRunGolden renders what `join --mode push --dry-run`
// prints for a new member and for a Pull member that switches.
func TestPushJoinDryRunGolden(t *testing.T) {
	pull := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"},
		Spec: flotillav1.MemberClusterSpec{SyncMode: flotillav1.SyncModePull, Region: "eu-west"}}
	existingNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flotillav1.SystemNamespace}}
	for _, tc := range []struct {
		golden string
		ns     *corev1.Namespace
		mc     *flotillav1.MemberCluster
		secret *corev1.Secret
		rotate bool
	}{
		{"push_dryrun_new.golden", nil, nil, nil, false},
		{"push_dryrun_switch.golden", existingNS, pull, nil, false},
		{"push_dryrun_rerun.golden", existingNS, pushMember("edge-1", PushSecretName("edge-1"), ""), &corev1.Secret{}, false},
		{"push_dryrun_rotate.golden", existingNS, pushMember("edge-1", PushSecretName("edge-1"), ""), &corev1.Secret{}, true},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			o := pushOpts()
			o.RotateToken = tc.rotate
			plan, err := PlanPushJoin(o, "https://edge-1.example.com:6443", tc.ns, tc.mc, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			WritePushDryRun(&b, plan)
			golden(t, tc.golden, b.Bytes())
		})
	}
}

func pushMember(name, secret, key string) *flotillav1.MemberCluster {
	return &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flotillav1.MemberClusterSpec{SyncMode: flotillav1.SyncModePush,
			Push: &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: secret, Key: key}}}}
}

// TestPlanPushJoin covers the decisions about the MemberCluster: create,
// switch from Pull, update a push member that uses join's Secret, and
// refuse one being deleted or one pointing at another Secret unless
// --overwrite.
func TestPlanPushJoin(t *testing.T) {
	deleting := pushMember("edge-1", PushSecretName("edge-1"), "")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name      string
		mc        *flotillav1.MemberCluster
		overwrite bool
		want      PushHubAction
		wantErr   []string
	}{
		{name: "new", want: PushCreate},
		{name: "pull member", mc: &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}, want: PushSwitch},
		{name: "push member, join's Secret", mc: pushMember("edge-1", PushSecretName("edge-1"), flotillav1.DefaultKubeconfigKey), want: PushUpdate},
		{name: "push member, join's Secret, key defaulted", mc: pushMember("edge-1", PushSecretName("edge-1"), ""), want: PushUpdate},
		{name: "push member, another Secret", mc: pushMember("edge-1", "hand-made", ""),
			wantErr: []string{"flotilla-system/hand-made", "--overwrite", "flotilla-push-edge-1"}},
		{name: "push member, another key", mc: pushMember("edge-1", PushSecretName("edge-1"), "config"),
			wantErr: []string{"key config", "--overwrite"}},
		{name: "push member, another Secret, overwrite", mc: pushMember("edge-1", "hand-made", ""), overwrite: true, want: PushUpdate},
		{name: "being deleted", mc: deleting, wantErr: []string{"MemberCluster edge-1 is being deleted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := pushOpts()
			o.Overwrite = tc.overwrite
			p, err := PlanPushJoin(o, "https://x:6443", nil, tc.mc, nil)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("planned %s, want an error", p.Action)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Action != tc.want {
				t.Errorf("action %s, want %s", p.Action, tc.want)
			}
		})
	}
}

// TestPushJoinOptionsCheck: bad input is refused with the flag named.
func TestPushJoinOptionsCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*PushJoinOptions)
		want   string
	}{
		{"no name", func(o *PushJoinOptions) { o.ClusterName = "" }, "--cluster-name: is required"},
		{"bad name", func(o *PushJoinOptions) { o.ClusterName = "Edge_1" }, "--cluster-name"},
		{"hub's label domain", func(o *PushJoinOptions) { o.Labels = map[string]string{"flotilla.dev/fleet": "x"} }, "--labels: key \"flotilla.dev/fleet\" is in the flotilla.dev/ domain"},
		{"hub's label subdomain", func(o *PushJoinOptions) { o.Labels = map[string]string{"x.flotilla.dev/a": "b"} }, "flotilla.dev/ domain"},
		{"bad label value", func(o *PushJoinOptions) { o.Labels = map[string]string{"env": "a b"} }, "--labels: value"},
		{"long region", func(o *PushJoinOptions) { o.Region = strings.Repeat("r", 64) }, "--region: 64 characters"},
		{"clear-text server", func(o *PushJoinOptions) { o.MemberServer = "http://edge:6443" }, "--member-server: \"http://edge:6443\": want https://"},
		{"other namespace", func(o *PushJoinOptions) { o.Namespace = "elsewhere" }, "--flotilla-namespace \"elsewhere\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := pushOpts()
			tc.change(&o)
			err := o.check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	o := pushOpts()
	if err := o.check(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestPushKubeconfig: the kubeconfig names the server, the CA and the
// token, is the same bytes for the same inputs (so a second join changes
// nothing), and is refused when it would be insecure.
func TestPushKubeconfig(t *testing.T) {
	ca, err := pki.NewCA("member-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := ca.CertPEM()
	kc, err := PushKubeconfig("edge-1", "https://10.0.0.1:6443", caPEM, "tok")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := PushKubeconfig("edge-1", "https://10.0.0.1:6443", caPEM, "tok")
	if !bytes.Equal(kc, again) {
		t.Error("two kubeconfigs of the same inputs differ: a second join would rewrite the hub's Secret")
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster].Server != "https://10.0.0.1:6443" || !bytes.Equal(cfg.Clusters[ctx.Cluster].CertificateAuthorityData, caPEM) ||
		cfg.AuthInfos[ctx.AuthInfo].Token != "tok" || cfg.Clusters[ctx.Cluster].InsecureSkipTLSVerify {
		t.Errorf("kubeconfig:\n%s", kc)
	}
	for _, tc := range []struct {
		name, server string
		ca           []byte
		token        string
		want         string
	}{
		{"http", "http://10.0.0.1:6443", caPEM, "tok", "want https://"},
		{"no CA", "https://10.0.0.1:6443", nil, "tok", "refusing an insecure kubeconfig"},
		{"not a CA", "https://10.0.0.1:6443", []byte("hello"), "tok", "no PEM certificate"},
		{"no token", "https://10.0.0.1:6443", caPEM, "", "no token"},
	} {
		if _, err := PushKubeconfig("edge-1", tc.server, tc.ca, tc.token); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestJoinModeFlags: push and pull flags do not mix, and push needs the
// hub's context; nothing is contacted before these checks.
func TestJoinModeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"join", "--mode", "push", "--cluster-name", "a", "--hub-context", "h", "--token", "abcdef.0123456789abcdef"}, "--token is for --mode pull"},
		{[]string{"join", "--mode", "push", "--cluster-name", "a", "--hub-context", "h", "--hub", "h:1"}, "--hub is for --mode pull"},
		{[]string{"join", "--mode", "push", "--cluster-name", "a"}, "--hub-context or --hub-kubeconfig is required"},
		{[]string{"join", "--cluster-name", "a", "--dry-run"}, "--dry-run is for --mode push"},
		{[]string{"join", "--mode", "sideways", "--cluster-name", "a"}, "--mode \"sideways\": want pull or push"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestPushExampleMatchesJoin keeps examples/push-member honest: its member
// objects are the ones join applies (kinds, names, role references, token
// annotation), and its hub file, filled in, is a Secret with a kubeconfig
// that loads and a Push MemberCluster that references it.
func TestPushExampleMatchesJoin(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "push-member")
	raw, err := os.ReadFile(filepath.Join(dir, "member.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	example := decodeAll(t, raw)
	objs, err := PushMemberObjects(flotillav1.SystemNamespace, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			continue // the example applies deploy/agent/rbac/role.yaml itself
		}
		want[o.GetKind()+"/"+objectName(o)] = o
	}
	for _, o := range example {
		k := o.GetKind() + "/" + objectName(o)
		w, ok := want[k]
		if !ok {
			t.Errorf("member.yaml has %s, which join does not apply", k)
			continue
		}
		delete(want, k)
		for _, f := range [][]string{{"roleRef"}, {"subjects"}, {"type"}, {"metadata", "annotations"}} {
			got, _, _ := unstructured.NestedFieldNoCopy(o.Object, f...)
			exp, _, _ := unstructured.NestedFieldNoCopy(w.Object, f...)
			if !equality.Semantic.DeepEqual(got, exp) {
				t.Errorf("member.yaml %s %v = %v, join applies %v", k, f, got, exp)
			}
		}
	}
	for k := range want {
		t.Errorf("member.yaml lacks %s, which join applies", k)
	}

	ca, err := pki.NewCA("member-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"CLUSTER_NAME": "edge-1", "SERVER": "https://10.0.0.1:6443", "TOKEN": "tok",
		"CA_DATA": base64.StdEncoding.EncodeToString(ca.CertPEM()), "REGION": "eu-west"}
	raw, err = os.ReadFile(filepath.Join(dir, "hub.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	filled := os.Expand(string(raw), func(k string) string {
		v, ok := vars[k]
		if !ok {
			t.Errorf("hub.yaml has placeholder ${%s}, which its header does not list", k)
		}
		return v
	})
	var secret corev1.Secret
	var mc flotillav1.MemberCluster
	for _, o := range decodeAll(t, []byte(filled)) {
		var err error
		switch o.GetKind() {
		case "Secret":
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &secret)
		case "MemberCluster":
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &mc)
		default:
			t.Errorf("hub.yaml has a %s", o.GetKind())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if secret.Name != PushSecretName("edge-1") || secret.Namespace != flotillav1.SystemNamespace {
		t.Errorf("hub.yaml's Secret is %s/%s, want %s/%s", secret.Namespace, secret.Name, flotillav1.SystemNamespace, PushSecretName("edge-1"))
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(secret.StringData[flotillav1.DefaultKubeconfigKey]))
	if err != nil {
		t.Fatalf("hub.yaml's kubeconfig: %v", err)
	}
	if cfg.Host != vars["SERVER"] || cfg.BearerToken != "tok" || !bytes.Equal(cfg.CAData, ca.CertPEM()) || cfg.Insecure {
		t.Errorf("hub.yaml's kubeconfig: host %s, token %q, CA %t", cfg.Host, cfg.BearerToken, bytes.Equal(cfg.CAData, ca.CertPEM()))
	}
	if !mc.IsPush() || mc.Spec.Push == nil || mc.Spec.Push.KubeconfigSecretRef.Name != secret.Name || mc.Spec.Push.KubeconfigSecretRef.Key != flotillav1.DefaultKubeconfigKey {
		t.Errorf("hub.yaml's MemberCluster: %+v", mc.Spec)
	}
}

func decodeAll(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := d.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(o.Object) > 0 {
			out = append(out, o)
		}
	}
}
