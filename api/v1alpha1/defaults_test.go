package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"
)

// crdDir holds the CRDs controller-gen generates from this package's markers.
const crdDir = "../../deploy/hub/crds"

// TestCRDDefaultsMatchConstants fails when a +kubebuilder:default marker and
// the Go constant for the same field differ, or when the CRD has a default
// without a constant (add one to defaults.go and to this table), so the
// marker, the webhook and the controllers cannot drift apart.
func TestCRDDefaultsMatchConstants(t *testing.T) {
	// want maps "<plural>:<field path>" to the constant the CRD's default
	// must equal.
	want := map[string]any{
		"myapps:spec.replicas": DefaultReplicas,
		"myapps:spec.placement.replicaScheduling.replicaSchedulingType": string(DefaultReplicaSchedulingType),
		"myapps:spec.failover.clusterUnreachable.tolerationSeconds":     DefaultUnreachableTolerationSeconds,
		"myapps:spec.failover.clusterUnreachable.purgeMode":             string(DefaultPurgeMode),
		"myapps:spec.failover.clusterUnreachable.gracePeriodSeconds":    DefaultGracePeriodSeconds,
		"myapps:spec.failover.failback.enabled":                         DefaultFailbackEnabled,
		"myapps:spec.failover.failback.stabilizationWindowSeconds":      DefaultFailbackWindowSeconds,
		"myapps:spec.rollout.strategy":                                  string(DefaultRolloutStrategy),
		"myapps:spec.rollout.progressive.maxConcurrency":                DefaultMaxConcurrency,
		"myapps:spec.rollout.progressive.maxFailures":                   DefaultMaxFailures,
		"myapps:spec.rollout.progressive.minSuccessTime":                DefaultMinSuccessTime,
		"myapps:spec.rollout.progressive.progressDeadline":              DefaultProgressDeadline,
		"myapps:spec.rollout.progressive.onFailure":                     string(DefaultOnFailure),
		"memberclusters:spec.syncMode":                                  string(DefaultSyncMode),
		"memberclusters:spec.push.kubeconfigSecretRef.key":              DefaultKubeconfigKey,
		"myapps:spec.deletionPolicy":                                    string(DefaultDeletionPolicy),
		"works:spec.deletionPolicy":                                     string(DefaultDeletionPolicy),
		"memberclusters:spec.deletionPolicy":                            string(DefaultMemberClusterDeletionPolicy),
		"memberclusters:spec.acceptance":                                string(DefaultAcceptance),
		"myapps:spec.rolloutOnConfigChange":                             DefaultRolloutOnConfigChange,
		"myapps:spec.service.type":                                      string(DefaultServiceType),
		"myapps:spec.service.ports[].protocol":                          string(DefaultServiceProtocol),
	}
	// inherited are the ends of field paths whose defaults come with
	// embedded Kubernetes types (corev1.EnvVar and corev1.ContainerPort),
	// not from Flotilla's markers.
	inherited := []string{
		"env[].valueFrom.configMapKeyRef.name",
		"env[].valueFrom.fileKeyRef.optional",
		"env[].valueFrom.secretKeyRef.name",
		"ports[].protocol",
	}
	isInherited := func(key string) bool {
		// spec.template.spec is corev1.PodSpec, whose defaults are
		// Kubernetes' own.
		if strings.HasPrefix(key, "myapps:spec.template.spec.") {
			return true
		}
		for _, suffix := range inherited {
			if strings.HasSuffix(key, "."+suffix) {
				return true
			}
		}
		return false
	}

	got := map[string]any{}
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s (%v)", crdDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Names    struct{ Plural string }
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema crdSchema `json:"openAPIV3Schema"`
					}
				}
			}
		}
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			v.Schema.OpenAPIV3Schema.defaults(crd.Spec.Names.Plural+":", "", got)
		}
	}

	for _, key := range sortedKeys(got) {
		if isInherited(key) {
			continue
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("%s: the CRD defaults it to %v but defaults.go has no constant for it", key, got[key])
			continue
		}
		if !sameDefault(got[key], w) {
			t.Errorf("%s: the CRD defaults it to %v, the Go constant is %v; change the +kubebuilder:default marker or the constant, then make manifests", key, got[key], w)
		}
	}
	for _, key := range sortedKeys(want) {
		if _, ok := got[key]; !ok {
			t.Errorf("%s: the CRD has no default for it, the Go constant is %v", key, want[key])
		}
	}
	for _, suffix := range inherited {
		found := false
		for key := range got {
			found = found || strings.HasSuffix(key, "."+suffix)
		}
		if !found {
			t.Errorf("%s: listed as inherited but no CRD field ending so has a default; drop it from the list", suffix)
		}
	}
}

// crdSchema is the part of an OpenAPI v3 schema that holds defaults.
type crdSchema struct {
	Default    json.RawMessage      `json:"default"`
	Properties map[string]crdSchema `json:"properties"`
	Items      *crdSchema           `json:"items"`
}

// defaults records in out every default under s, keyed by prefix and its
// field path (array items add "[]").
func (s crdSchema) defaults(prefix, path string, out map[string]any) {
	if len(s.Default) > 0 {
		var v any
		if err := json.Unmarshal(s.Default, &v); err == nil {
			out[prefix+path] = v
		}
	}
	for name, p := range s.Properties {
		p.defaults(prefix, strings.TrimPrefix(path+"."+name, "."), out)
	}
	if s.Items != nil {
		s.Items.defaults(prefix, path+"[]", out)
	}
}

// sameDefault says whether got, a default decoded from the CRD's JSON,
// equals the Go constant want.
func sameDefault(got, want any) bool {
	switch w := want.(type) {
	case int32:
		n, ok := got.(float64)
		return ok && n == float64(w)
	case time.Duration:
		s, ok := got.(string)
		if !ok {
			return false
		}
		d, err := time.ParseDuration(s)
		return err == nil && d == w
	default:
		return got == want
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
