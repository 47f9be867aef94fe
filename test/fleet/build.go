package fleet

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// BuildBinaries builds the hub and agent binaries of the repository at
// root into dir (the Go build cache makes this quick when nothing changed).
func BuildBinaries(root, dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./hub", "./agent", "./cmd/kubectl-flotilla")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the hub, the agent and kubectl-flotilla: %v\n%s", err, out)
	}
	return nil
}
