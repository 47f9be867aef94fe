// Command crdtrim removes the field descriptions beneath given paths of a
// CRD's schema, in place. `make manifests` runs it on the MyApp CRD's pod
// spec (spec.template.spec): its descriptions are Kubernetes' own PodSpec
// documentation (kubectl explain deployment.spec.template.spec has them)
// and would make up three quarters of the CRD.
//
// Usage: crdtrim FILE PATH... where PATH is a dotted path of property
// names from the version's openAPIV3Schema, e.g. spec.template.spec. The
// description of the node at PATH itself is kept.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: crdtrim FILE PATH...")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "crdtrim:", err)
		os.Exit(1)
	}
}

func run(file string, paths []string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	versions := lookup(doc.Content[0], "spec", "versions")
	if versions == nil || versions.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: no spec.versions", file)
	}
	for _, v := range versions.Content {
		schema := lookup(v, "schema", "openAPIV3Schema")
		for _, p := range paths {
			n := schema
			for _, name := range strings.Split(p, ".") {
				n = lookup(n, "properties", name)
			}
			if n == nil {
				return fmt.Errorf("%s: no schema at %s", file, p)
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				stripDescriptions(n.Content[i+1])
			}
		}
	}
	var out bytes.Buffer
	out.WriteString("---\n")
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(doc.Content[0]); err != nil {
		return err
	}
	return os.WriteFile(file, out.Bytes(), 0o644)
}

// lookup follows keys through mapping nodes; nil when one is missing.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// stripDescriptions removes every description key beneath n. A property
// named "description" is a key of a properties map, not a schema keyword,
// and is kept (its schema is still stripped).
func stripDescriptions(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "description" && v.Kind == yaml.ScalarNode {
				continue
			}
			stripDescriptions(v)
			kept = append(kept, k, v)
		}
		n.Content = kept
	case yaml.SequenceNode:
		for _, c := range n.Content {
			stripDescriptions(c)
		}
	}
}
