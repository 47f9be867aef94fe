package helmchart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/deploy"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// TestInstallMatchesKustomize installs the hub chart into one real
// kube-apiserver (envtest: apiserver and etcd from bin/) and the agent
// chart into another, lists every object the install created, and
// compares the set (apiVersion, kind, namespace, name) with the objects
// of the kustomize bases deploy/hub and deploy/agent. Then helm uninstall,
// and what is left is asserted. No kubelet: pods never run; only the
// objects matter.
func TestInstallMatchesKustomize(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kube-apiservers")
	}
	h := NewHelm(t)
	for _, tc := range []struct {
		chart, base string
		// extra: objects of the kustomize base the chart renders
		// under another name, or that kustomize makes from a generator.
		extra []string
		// onlyHelm: objects the install creates that the base does not
		// ship, and why.
		onlyHelm map[string]string
		// onlyBase: objects of the base the chart does not install, and why.
		onlyBase map[string]string
		// left: what helm uninstall leaves.
		left []string
	}{{
		chart: HubChart, base: deploy.Hub,
		left: []string{
			// helm never deletes what it installed from a chart's crds/
			// (deleting a CRD deletes every MyApp and Work).
			"apiextensions.k8s.io/v1 CustomResourceDefinition fleetnamespacepolicies.flotilla.dev",
			"apiextensions.k8s.io/v1 CustomResourceDefinition memberclusters.flotilla.dev",
			"apiextensions.k8s.io/v1 CustomResourceDefinition myapps.flotilla.dev",
			"apiextensions.k8s.io/v1 CustomResourceDefinition works.flotilla.dev",
			// --create-namespace made it; it is no object of the release.
			"v1 Namespace flotilla-system",
		},
	}, {
		chart: AgentChart, base: deploy.Agent,
		// kustomize's configMapGenerator names it flotilla-agent-config-<hash
		// of the contents> (deploy.Objects does not render generators);
		// the chart names it flotilla-agent-config and rolls the agents by
		// a checksum annotation on the pod template instead. The
		// Deployment reads it by that name in both.
		extra: []string{"v1 ConfigMap flotilla-system/flotilla-agent-config"},
		left:  []string{"v1 Namespace flotilla-system"},
	}} {
		t.Run(tc.chart, func(t *testing.T) {
			env := &envtest.Environment{BinaryAssetsDirectory: testbed.DefaultBinDir()}
			cfg, err := env.Start()
			if err != nil {
				t.Fatalf("starting the kube-apiserver: %v", err)
			}
			t.Cleanup(func() {
				if err := env.Stop(); err != nil {
					t.Errorf("stopping the kube-apiserver: %v", err)
				}
			})
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			before := settled(ctx, t, cfg)

			out, err := h.Run("install", tc.chart, ChartDir(tc.chart), "--kubeconfig", kubeconfig,
				"--namespace", Namespace, "--create-namespace")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("helm install:\n%s", out)
			created := minus(snapshot(ctx, t, cfg), before)

			base, err := deploy.Objects(tc.base, "")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for _, o := range base {
				want[objKey(o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())] = true
			}
			for _, k := range tc.extra {
				want[k] = true
			}
			var missing, surplus []string
			for k := range want {
				if !created[k] && tc.onlyBase[k] == "" {
					missing = append(missing, k)
				}
			}
			for k := range created {
				if !want[k] && tc.onlyHelm[k] == "" {
					surplus = append(surplus, k)
				}
			}
			slices.Sort(missing)
			slices.Sort(surplus)
			if len(missing) > 0 {
				t.Errorf("objects of the kustomize base %s the chart did not create:\n  %s", tc.base, strings.Join(missing, "\n  "))
			}
			if len(surplus) > 0 {
				t.Errorf("objects the chart created that the kustomize base %s lacks:\n  %s", tc.base, strings.Join(surplus, "\n  "))
			}
			if len(created) < len(base) {
				t.Errorf("%d objects created, the base has %d", len(created), len(base))
			}

			if out, err := h.Run("uninstall", tc.chart, "--kubeconfig", kubeconfig, "--namespace", Namespace); err != nil {
				t.Fatal(err)
			} else {
				t.Logf("helm uninstall:\n%s", out)
			}
			// Deletion is asynchronous for some kinds; poll until the
			// leftovers are exactly the expected ones.
			var left []string
			var lastErr error
			err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				now, err := list(ctx, cfg)
				if err != nil {
					lastErr = err
					return false, nil
				}
				left = keys(minus(now, before))
				return slices.Equal(left, sorted(tc.left)), nil
			})
			if err != nil {
				t.Errorf("after helm uninstall, left behind (last listing error: %v):\n  %s\nwant:\n  %s", lastErr, strings.Join(left, "\n  "), strings.Join(sorted(tc.left), "\n  "))
			}
		})
	}
}

// snapshot lists every object of every listable resource as
// "apiVersion kind [namespace/]name", leaving out what is no object of
// an install: the derived kinds below, Helm's release Secrets (Helm's own
// bookkeeping), and the Leases the apiserver keeps of itself in
// kube-system.
func snapshot(ctx context.Context, t *testing.T, cfg *rest.Config) map[string]bool {
	t.Helper()
	out, err := list(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// settled is the snapshot once the apiserver has made its own objects:
// Service default/kubernetes (its bootstrap controller creates it a moment
// after the apiserver is ready, with the EndpointSlice and namespaces) is
// there and two snapshots a second apart agree. Without this wait, an
// object of the apiserver's own could land between the snapshot and the
// install and count as the chart's.
func settled(ctx context.Context, t *testing.T, cfg *rest.Config) map[string]bool {
	t.Helper()
	var last map[string]bool
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := list(ctx, cfg)
		if err != nil {
			return false, nil
		}
		stable := last != nil && len(minus(now, last)) == 0 && len(minus(last, now)) == 0
		last = now
		return stable && now["v1 Service default/kubernetes"], nil
	})
	if err != nil {
		t.Fatalf("the apiserver's own objects did not settle within a minute (Service default/kubernetes present: %v): %v", last["v1 Service default/kubernetes"], err)
	}
	return last
}

// derived are kinds the apiserver makes by itself from what was
// installed: the APIService it registers for a CRD's group and version,
// and the IPAddress objects of Services' cluster IPs. Deprecated kinds no
// controller fills here (Endpoints: no endpoints controller; the
// apiserver's ComponentStatuses) are not listed either.
var derived = map[string]bool{"APIService": true, "IPAddress": true, "Endpoints": true, "ComponentStatus": true, "Event": true}

func list(ctx context.Context, cfg *rest.Config) (map[string]bool, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || derived[r.Kind] {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing %s %s: %w", l.GroupVersion, r.Name, err)
			}
			for _, o := range items.Items {
				if r.Kind == "Secret" && strings.HasPrefix(o.GetName(), "sh.helm.release.") {
					continue
				}
				if r.Kind == "Lease" && o.GetNamespace() == "kube-system" {
					continue
				}
				ns := o.GetNamespace()
				if !r.Namespaced {
					ns = ""
				}
				out[objKey(l.GroupVersion, r.Kind, ns, o.GetName())] = true
			}
		}
	}
	return out, nil
}

func objKey(apiVersion, kind, ns, name string) string {
	if ns != "" {
		name = ns + "/" + name
	}
	return apiVersion + " " + kind + " " + name
}

func minus(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		if !b[k] {
			out[k] = true
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
