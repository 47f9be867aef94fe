package helmchart

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from helm template")

// goldenCases are the value sets rendered against testdata/<name>.golden;
// testdata/values/<name>.yaml holds the values.
var goldenCases = []struct {
	name, chart string
}{
	{"hub-default", HubChart},
	{"hub-cert-manager", HubChart},
	{"hub-cert-manager-issuer", HubChart},
	{"hub-provided", HubChart},
	{"hub-metrics", HubChart},
	{"hub-tuned", HubChart},
	{"agent-default", AgentChart},
	{"agent-join", AgentChart},
	{"agent-provided", AgentChart},
	{"agent-metrics", AgentChart},
}

func valuesFile(name string) string { return filepath.Join("testdata", "values", name+".yaml") }

// TestLint runs helm lint, plain and --strict, on each chart with its
// defaults and with every value set of the golden tests.
func TestLint(t *testing.T) {
	h := NewHelm(t)
	for _, chart := range []string{HubChart, AgentChart} {
		for _, strict := range []bool{false, true} {
			args := []string{"lint", ChartDir(chart), "--namespace", Namespace}
			if strict {
				args = append(args, "--strict")
			}
			out, err := h.Run(args...)
			if err != nil {
				t.Errorf("%s (strict %v): %v", chart, strict, err)
				continue
			}
			if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("%s (strict %v): helm lint did not report the chart passed:\n%s", chart, strict, out)
			}
		}
	}
	for _, tc := range goldenCases {
		if _, err := h.Run("lint", ChartDir(tc.chart), "--strict", "--namespace", Namespace, "-f", valuesFile(tc.name)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestTemplateGolden renders each value set with helm template and
// compares it with testdata/<name>.golden (go test -update rewrites them),
// then checks what each set is about in the objects themselves.
func TestTemplateGolden(t *testing.T) {
	h := NewHelm(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.Run("template", tc.chart, ChartDir(tc.chart), "--namespace", Namespace, "-f", valuesFile(tc.name))
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./test/helmchart -run TestTemplateGolden -update writes it)", err)
			}
			if out != string(want) {
				t.Errorf("helm template differs from %s (go test -update rewrites it after a deliberate change):\n%s", golden, firstDiff(string(want), out))
			}
			objs := decodeAll(t, out)
			if check := checks[tc.name]; check != nil {
				check(t, objs)
			}
		})
	}
}

// checks state what each value set must produce, beyond the golden text.
var checks = map[string]func(t *testing.T, objs map[string]*unstructured.Unstructured){
	"hub-default": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		args := containerArgs(t, objs, "Deployment/flotilla-hub")
		for _, a := range args {
			if strings.HasPrefix(a, "--cert-dir") {
				t.Errorf("self-managed certificates, but %s", a)
			}
		}
		mustHave(t, objs, "ClusterRole/flotilla-hub", "Role/flotilla-system/flotilla-hub", "ClusterRole/flotilla-metrics-reader",
			"ValidatingAdmissionPolicy/flotilla-works-hub-only", "PodDisruptionBudget/flotilla-system/flotilla-hub")
		mustNotHave(t, objs, "Certificate/flotilla-system/flotilla-hub", "ServiceMonitor/flotilla-system/flotilla-hub")
		// The hub owns caBundle; a value from the chart would make helm 4's
		// server-side upgrade conflict with it.
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			wc := objs[kind+"/flotilla-hub"]
			if wc == nil {
				t.Fatalf("no %s/flotilla-hub", kind)
			}
			hooks, _, _ := unstructured.NestedSlice(wc.Object, "webhooks")
			for _, h := range hooks {
				if _, has, _ := unstructured.NestedFieldNoCopy(h.(map[string]any), "clientConfig", "caBundle"); has {
					t.Errorf("%s/flotilla-hub sets clientConfig.caBundle; the hub keeps it", kind)
				}
			}
		}
	},
	"hub-cert-manager": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		mustHave(t, objs, "Issuer/flotilla-system/flotilla-hub-selfsigned", "Certificate/flotilla-system/flotilla-hub-ca",
			"Issuer/flotilla-system/flotilla-hub-ca", "Certificate/flotilla-system/flotilla-hub")
		cert := objs["Certificate/flotilla-system/flotilla-hub"]
		if s, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); s != "flotilla-hub-certs" {
			t.Errorf("Certificate secretName %q, want flotilla-hub-certs", s)
		}
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		ips, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "ipAddresses")
		if !contains(dns, "flotilla-hub-webhook.flotilla-system.svc") || !contains(dns, "hub.example.com") || !contains(ips, "10.0.0.7") {
			t.Errorf("Certificate names: dns %v, ips %v", dns, ips)
		}
		mustMountCerts(t, objs, "flotilla-hub-certs")
	},
	"hub-provided": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		mustNotHave(t, objs, "Certificate/flotilla-system/flotilla-hub", "Issuer/flotilla-system/flotilla-hub-ca")
		mustMountCerts(t, objs, "my-hub-certs")
	},
	"hub-metrics": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		mustHave(t, objs, "ServiceMonitor/flotilla-system/flotilla-hub", "Service/flotilla-system/flotilla-hub-metrics",
			"Secret/flotilla-system/flotilla-hub-metrics-scraper-token", "ClusterRoleBinding/flotilla-hub-metrics-scraper")
		crb := objs["ClusterRoleBinding/flotilla-hub-metrics-scraper"]
		if r, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name"); r != "flotilla-metrics-reader" {
			t.Errorf("the scraper is bound to %q, want flotilla-metrics-reader", r)
		}
		sm := objs["ServiceMonitor/flotilla-system/flotilla-hub"]
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["honorLabels"] != true {
			t.Errorf("ServiceMonitor endpoints %v: want honorLabels, so that a MyApp's namespace label is kept", eps)
		}
		args := containerArgs(t, objs, "Deployment/flotilla-system/flotilla-hub")
		for _, want := range []string{"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s"} {
			if !contains(args, want) {
				t.Errorf("args %v lack %s", args, want)
			}
		}
	},
	"hub-tuned": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		args := containerArgs(t, objs, "Deployment/flotilla-hub")
		for _, want := range []string{"--leader-elect=false", "--heartbeat-grace=40s", "--partition-brake-threshold=0.5",
			"--eviction-rate-limit=3", "--zap-log-level=debug", "--metrics-bind-address=0", "--serving-hosts=hub.example.com"} {
			if !contains(args, want) {
				t.Errorf("args %v lack %s", args, want)
			}
		}
		mustHave(t, objs, "FleetNamespacePolicy/team-a")
		mustNotHave(t, objs, "PodDisruptionBudget/flotilla-system/flotilla-hub")
		svc := objs["Service/flotilla-system/flotilla-hub"]
		if svc == nil {
			t.Fatal("no Service flotilla-hub")
		}
		typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if typ != "NodePort" || len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["nodePort"]) != "30943" {
			t.Errorf("Service flotilla-hub type %q, ports %v; want NodePort with nodePort 30943", typ, ports)
		}
	},
	"agent-default": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		mustHave(t, objs, "ConfigMap/flotilla-system/flotilla-agent-config", "ClusterRole/flotilla-agent", "Role/flotilla-system/flotilla-agent")
		mustNotHave(t, objs, "Secret/flotilla-system/flotilla-agent-bootstrap")
	},
	"agent-join": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		s := objs["Secret/flotilla-system/flotilla-agent-bootstrap"]
		if s == nil {
			t.Fatal("no bootstrap Secret")
		}
		data, _, _ := unstructured.NestedStringMap(s.Object, "stringData")
		for k, v := range map[string]string{"hub-address": "hub.example.com:9443", "token": "abcdef.0123456789abcdef", "cluster-name": "member-1", "region": "eu-west"} {
			if data[k] != v {
				t.Errorf("bootstrap Secret %s = %q, want %q", k, data[k], v)
			}
		}
		// Used once: a pre-install hook, so helm upgrade never creates it
		// again (the agent would join anew) and --wait never waits for it.
		if hook := s.GetAnnotations()["helm.sh/hook"]; hook != "pre-install" {
			t.Errorf("bootstrap Secret's helm.sh/hook = %q, want pre-install", hook)
		}
	},
	"agent-provided": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		args := containerArgs(t, objs, "Deployment/flotilla-system/flotilla-agent")
		for _, want := range []string{"--create-namespaces=false", "--allowed-namespaces=apps-*,web", "--default-pod-security=restricted", "--heartbeat-interval=5s",
			"--leader-election-lease-duration=6s", "--leader-election-renew-deadline=5s", "--leader-election-retry-period=1s"} {
			if !contains(args, want) {
				t.Errorf("args %v lack %s", args, want)
			}
		}
		cm := objs["ConfigMap/flotilla-system/flotilla-agent-config"]
		if a, _, _ := unstructured.NestedString(cm.Object, "data", "hub-address"); a != "10.0.0.7:9443,10.0.0.8:9443" {
			t.Errorf("hub-address %q", a)
		}
	},
	"agent-metrics": func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		mustHave(t, objs, "ServiceMonitor/flotilla-system/flotilla-agent")
		mustNotHave(t, objs, "ClusterRole/flotilla-metrics-reader")
	},
}

// TestRefusedValues: values the schema (or the chart's checks) refuse
// fail helm template with an error naming the field.
func TestRefusedValues(t *testing.T) {
	h := NewHelm(t)
	for _, tc := range []struct {
		chart string
		set   []string
		field string
	}{
		{HubChart, []string{"certificates.mode=vault"}, "/certificates/mode"},
		{HubChart, []string{"replicas=two"}, "/replicas"},
		{HubChart, []string{"timings.heartbeatGrace=soon"}, "/timings/heartbeatGrace"},
		{HubChart, []string{"evictions.partitionBrakeThreshold=2"}, "/evictions/partitionBrakeThreshold"},
		{HubChart, []string{"replica=3"}, "'replica'"},
		{HubChart, []string{"service.type=ExternalName"}, "/service/type"},
		{HubChart, []string{"metrics.enabled=false", "metrics.serviceMonitor.enabled=true"}, "metrics.serviceMonitor.enabled: needs metrics.enabled"},
		{AgentChart, []string{"certificates.mode=self-managed"}, "/certificates/mode"},
		{AgentChart, []string{"certificates.mode=provided"}, "hubAddress: must be set"},
		{AgentChart, []string{"certificates.join.caHash=md5:00"}, "/certificates/join/caHash"},
		{AgentChart, []string{"hubAddress=h:9443", "certificates.join.token=a.b"}, "certificates.join.caHash: must be set"},
		{AgentChart, []string{"namespacePolicy.defaultPodSecurity=lax"}, "/namespacePolicy/defaultPodSecurity"},
		{AgentChart, []string{"leaderElection.enabled=maybe"}, "/leaderElection/enabled"},
		{AgentChart, []string{"leaderElection.leaseDuration=5 seconds"}, "/leaderElection/leaseDuration"},
		{HubChart, []string{"leaderElection.retryPeriod=1"}, "/leaderElection/retryPeriod"},
	} {
		args := []string{"template", tc.chart, ChartDir(tc.chart), "--namespace", Namespace}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		_, err := h.Run(args...)
		if err == nil {
			t.Errorf("%s %v: helm template accepted it", tc.chart, tc.set)
			continue
		}
		// helm's own message, not the command line that holds the value.
		var he *Error
		if !errors.As(err, &he) {
			t.Fatalf("%s %v: %v", tc.chart, tc.set, err)
		}
		if !strings.Contains(he.Stderr, tc.field) {
			t.Errorf("%s %v: the error does not name %s:\n%s", tc.chart, tc.set, tc.field, he.Stderr)
		}
	}
}

// decodeAll decodes helm's output into objects keyed by Kind/namespace/name
// (Kind/name when cluster-scoped).
func decodeAll(t *testing.T, out string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding helm's output: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs[key(u.GetKind(), u.GetNamespace(), u.GetName())] = u
	}
}

func key(kind, ns, name string) string {
	if ns == "" {
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
}

func mustHave(t *testing.T, objs map[string]*unstructured.Unstructured, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if objs[k] == nil {
			t.Errorf("no %s", k)
		}
	}
}

func mustNotHave(t *testing.T, objs map[string]*unstructured.Unstructured, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if objs[k] != nil {
			t.Errorf("unexpected %s", k)
		}
	}
}

func container(t *testing.T, objs map[string]*unstructured.Unstructured, deployment string) map[string]any {
	t.Helper()
	d := objs[deployment]
	if d == nil {
		d = objs[strings.Replace(deployment, "Deployment/", "Deployment/"+Namespace+"/", 1)]
	}
	if d == nil {
		t.Fatalf("no %s", deployment)
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers", deployment, len(cs))
	}
	return cs[0].(map[string]any)
}

func containerArgs(t *testing.T, objs map[string]*unstructured.Unstructured, deployment string) []string {
	t.Helper()
	args, _, _ := unstructured.NestedStringSlice(container(t, objs, deployment), "args")
	return args
}

// mustMountCerts checks the hub mounts secret at /etc/flotilla/certs and
// reads it with --cert-dir.
func mustMountCerts(t *testing.T, objs map[string]*unstructured.Unstructured, secret string) {
	t.Helper()
	if !contains(containerArgs(t, objs, "Deployment/flotilla-hub"), "--cert-dir=/etc/flotilla/certs") {
		t.Error("no --cert-dir")
	}
	d := objs["Deployment/"+Namespace+"/flotilla-hub"]
	vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == secret {
			return
		}
	}
	t.Errorf("no volume of Secret %s in %v", secret, vols)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// firstDiff shows the first line where got departs from want.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return "(equal lines, different ends)"
}
