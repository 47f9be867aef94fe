// Package images tests `make images` (hack/build-images.sh and the
// Dockerfile) against the machine's Docker engine: both images build with no
// registry on the scratch base, run their static binary as user 65532, and
// carry the files a binary on scratch needs; with no engine answering the
// build stops with a message that says so.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestImagesBuildOnScratch builds both images under a repository name of its
// own, checks what is in them and that each binary starts, and removes them.
func TestImagesBuildOnScratch(t *testing.T) {
	if out, err := run(t, nil, "docker", "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Fatalf("this test needs the Docker engine every Flotilla machine has; docker version: %v\n%s", err, out)
	}
	repo := fmt.Sprintf("flotilla-images-test-%d", os.Getpid())
	const tag = "t"
	images := map[string]string{"hub": repo + "/flotilla-hub:" + tag, "agent": repo + "/flotilla-agent:" + tag}
	t.Cleanup(func() {
		for _, image := range images {
			if out, err := run(t, nil, "docker", "rmi", "-f", image); err != nil {
				t.Logf("removing %s: %v\n%s", image, err, out)
			}
		}
	})
	out, err := run(t, []string{"IMAGE_REPO=" + repo, "IMAGE_TAG=" + tag, "VERSION=v0.0.0-imagetest"}, "hack/build-images.sh")
	if err != nil {
		t.Fatalf("hack/build-images.sh: %v\n%s", err, out)
	}
	t.Logf("hack/build-images.sh:\n%s", out)

	for cmd, image := range images {
		t.Run(cmd, func(t *testing.T) {
			user, err := run(t, nil, "docker", "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}} {{index .Config.Labels \"org.opencontainers.image.version\"}}", image)
			if err != nil {
				t.Fatalf("inspecting %s: %v\n%s", image, err, user)
			}
			if want := fmt.Sprintf("65532:65532 [\"/%s\"] v0.0.0-imagetest", cmd); strings.TrimSpace(user) != want {
				t.Errorf("%s: user, entrypoint and version label %q, want %q", image, strings.TrimSpace(user), want)
			}

			// The files of the image: the binary, the nonroot user, the CA
			// bundle, and nothing of a distribution (scratch has no shell).
			files := imageFiles(t, image)
			for _, f := range []string{cmd, "etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt"} {
				if _, ok := files[f]; !ok {
					t.Errorf("%s has no /%s; it has %v", image, f, keys(files))
				}
			}
			if _, ok := files["bin/sh"]; ok {
				t.Errorf("%s has /bin/sh: its base is not scratch", image)
			}
			if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") {
				t.Errorf("%s: /etc/passwd has no nonroot user 65532:\n%s", image, files["etc/passwd"])
			}

			// The binary starts on scratch (a dynamically linked one would
			// not find its loader) and prints its flags.
			help, _ := run(t, nil, "docker", "run", "--rm", "--network", "none", "--name", fmt.Sprintf("%s-%s", strings.ReplaceAll(repo, "/", "-"), cmd), image, "-h")
			if !strings.Contains(help, "-leader-elect") && !strings.Contains(help, "--leader-elect") {
				t.Errorf("%s -h did not print the binary's flags (leader-elect):\n%s", image, help)
			}
		})
	}
}

// TestImagesSayWhenNoEngineAnswers points the build at a socket no engine
// listens on: it stops before compiling anything, naming the missing engine.
func TestImagesSayWhenNoEngineAnswers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-engine.sock")
	out, err := run(t, []string{"DOCKER_HOST=unix://" + sock, "IMAGE_REPO=flotilla-images-test-none"}, "hack/build-images.sh")
	if err == nil {
		t.Fatalf("hack/build-images.sh succeeded with DOCKER_HOST at %s, where nothing listens:\n%s", sock, out)
	}
	if !strings.Contains(out, "no Docker engine answers") || !strings.Contains(out, sock) {
		t.Errorf("the error does not say that no engine answers at %s:\n%s", sock, out)
	}
	if strings.Contains(out, "compiling") {
		t.Errorf("it compiled before finding there is no engine:\n%s", out)
	}
}

// imageFiles lists the regular files of an image (path -> content for
// /etc/passwd, "" for the others), from `docker export` of a container
// created, never started, and removed.
func imageFiles(t *testing.T, image string) map[string]string {
	t.Helper()
	name := fmt.Sprintf("flotilla-images-test-export-%d", os.Getpid())
	if out, err := run(t, nil, "docker", "create", "--name", name, image); err != nil {
		t.Fatalf("docker create %s: %v\n%s", image, err, out)
	}
	defer func() {
		if out, err := run(t, nil, "docker", "rm", "-f", name); err != nil {
			t.Errorf("docker rm %s: %v\n%s", name, err, out)
		}
	}()
	cmd := exec.Command("docker", "export", name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading docker export of %s: %v", image, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := strings.TrimPrefix(h.Name, "./")
		files[p] = ""
		if p == "etc/passwd" {
			b, _ := io.ReadAll(tr)
			files[p] = string(b)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("docker export %s: %v\n%s", image, err, stderr.String())
	}
	return files
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
