// Package deployrbac reads the RBAC objects deploy/ ships for the hub and
// the agent (the generated rbac/role.yaml, the bindings and the metrics
// reader role) straight from the repository, so tests run the hub and the
// agent with exactly the privileges a cluster install gives them, and a
// change to the markers or the bindings is tested the moment it is made.
// Load reads any of deploy/'s manifests (the hub's webhook configurations,
// say) the same way. It also makes service account tokens and asks
// SubjectAccessReviews, the two things RBAC tests need.
package deployrbac

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Component is "hub" or "agent": a folder of deploy/.
type Component string

// The two components deploy/ installs.
const (
	Hub   Component = "hub"
	Agent Component = "agent"
)

// DeployDir is the repository's deploy/, found from this file's own place
// in the source tree, so a test package at any depth reads it.
func DeployDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "deploy"
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy")
}

// Files are the RBAC manifests of c: the generated roles, their bindings
// and the metrics reader ClusterRole.
func Files(c Component) []string {
	dir := filepath.Join(DeployDir(), string(c))
	return []string{
		filepath.Join(dir, "rbac", "role.yaml"),
		filepath.Join(dir, "role_binding.yaml"),
		filepath.Join(dir, "metrics_reader_role.yaml"),
	}
}

// Load decodes every object in the multi-document YAML files into typed
// objects of client-go's scheme.
func Load(files ...string) ([]client.Object, error) {
	var objs []client.Object
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := dec.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 || isOnlyComments(doc) {
				continue
			}
			obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("decoding %s: %w", f, err)
			}
			o, ok := obj.(client.Object)
			if !ok {
				return nil, fmt.Errorf("decoding %s: %T is not an object", f, obj)
			}
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no objects in %q", files)
	}
	return objs, nil
}

// Apply creates objs with c, leaving an object that exists already as it
// is (the deploy files never change during a test run).
func Apply(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o.DeepCopyObject().(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// Install loads component's RBAC manifests and applies them with c.
func Install(ctx context.Context, c client.Client, component Component) error {
	objs, err := Load(Files(component)...)
	if err != nil {
		return err
	}
	return Apply(ctx, c, objs)
}

// isOnlyComments says whether a YAML document holds nothing but comments
// (a file's header before its first object).
func isOnlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}
