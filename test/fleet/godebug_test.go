package fleet_test

import (
	"bytes"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/flotilla-dev/flotilla/test/fleet"
)

// TestAgentGODEBUGAsShipped: the fleet runs its agents with the GODEBUG
// the agent's manifest and chart (its default rendering) give the agent
// container, so what the bench measures is the agent as shipped.
func TestAgentGODEBUGAsShipped(t *testing.T) {
	for _, path := range []string{"../../deploy/agent/deployment.yaml", "../helmchart/testdata/agent-default.golden"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var d appsv1.Deployment
			if err := dec.Decode(&d); err != nil {
				break
			}
			if d.Kind != "Deployment" {
				continue
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name != "agent" {
					continue
				}
				for _, e := range c.Env {
					if e.Name == "GODEBUG" {
						found = true
						if e.Value != fleet.AgentGODEBUG {
							t.Errorf("%s: the agent's GODEBUG is %q; the fleet runs agents with %q", path, e.Value, fleet.AgentGODEBUG)
						}
					}
				}
			}
		}
		if !found {
			t.Errorf("%s: no GODEBUG in the agent container's env; the fleet runs agents with %q", path, fleet.AgentGODEBUG)
		}
	}
}
