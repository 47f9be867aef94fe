package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HTTPRouteCRD is the path of the Gateway API HTTPRoute CRD (standard
// channel) in the module cache, at the version go.mod requires, for tests
// and the bench that install it into a hub.
func HTTPRouteCRD() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return "", fmt.Errorf("finding the Gateway API module (go list -m sigs.k8s.io/gateway-api): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list printed no directory for sigs.k8s.io/gateway-api (is the module downloaded?)")
	}
	path := filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_httproutes.yaml")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the HTTPRoute CRD: %w", err)
	}
	return path, nil
}
