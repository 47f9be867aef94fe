package helmchart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/internal/cli"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
)

// TestJoinValuesFromCLI renders the agent chart with the values `kubectl
// flotilla token create --helm-values` prints (plus the member's name, as
// the install docs say): the bootstrap Secret carries what the agent joins
// with.
func TestJoinValuesFromCLI(t *testing.T) {
	h := NewHelm(t)
	tok, err := bootstrap.ParseToken("abcdef.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	caHash := "sha256:" + strings.Repeat("ab", 32)
	values := filepath.Join(t.TempDir(), "join-values.yaml")
	if err := os.WriteFile(values, []byte(cli.AgentHelmValues("hub.example.com:9443", tok, caHash)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := h.Run("template", AgentChart, ChartDir(AgentChart), "--namespace", Namespace, "-f", values, "--set", "clusterName=member-1")
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out)
	s := objs["Secret/flotilla-system/flotilla-agent-bootstrap"]
	if s == nil {
		t.Fatalf("no bootstrap Secret from the CLI's values:\n%s", out)
	}
	data, _, _ := unstructured.NestedStringMap(s.Object, "stringData")
	for k, v := range map[string]string{"hub-address": "hub.example.com:9443", "token": tok.String(), "ca-hash": caHash, "cluster-name": "member-1"} {
		if data[k] != v {
			t.Errorf("bootstrap Secret %s = %q, want %q", k, data[k], v)
		}
	}
}
