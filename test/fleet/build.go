package fleet

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// BuildTags are the build tags the hub and agent executables are built
// with everywhere (the Makefile's GO_TAGS, hack/build-images.sh, here):
// grpcnotrace leaves out gRPC's golang.org/x/net/trace, whose
// html/template would keep every exported method of every type in the
// executables (docs/architecture.md, "Executable size").
const BuildTags = "grpcnotrace"

// BuildBinaries builds the hub and agent binaries of the repository at
// root into dir (the Go build cache makes this quick when nothing changed).
func BuildBinaries(root, dir string) error {
	cmd := exec.Command("go", "build", "-tags", BuildTags, "-o", dir+string(filepath.Separator), "./hub", "./agent", "./cmd/kubectl-flotilla")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the hub, the agent and kubectl-flotilla: %v\n%s", err, out)
	}
	return nil
}
