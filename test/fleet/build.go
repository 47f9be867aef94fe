package fleet

import (
	"fmt"
	"os"
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
// root into dir (the Go build cache makes this quick when nothing changed),
// as hack/build-images.sh builds the images' executables: static
// (CGO_ENABLED=0, so no libc is mapped: a cgo build maps about 1.4 MiB of
// libc and its loader, which the bench would count in each process's RSS
// and the shipped images do not have), with the time zone database, and
// BuildTags. Unlike the images' they keep their symbol table, which the
// bench's -rss-map reads.
func BuildBinaries(root, dir string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "timetzdata,"+BuildTags, "-o", dir+string(filepath.Separator), "./hub", "./agent", "./cmd/kubectl-flotilla")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the hub, the agent and kubectl-flotilla: %v\n%s", err, out)
	}
	return nil
}
