package fleet

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The hub and agent executables keep the linker's dead-code elimination
// of methods: no function is linked that calls reflect's Method or
// MethodByName with a name the compiler cannot see (the linker marks it
// <ReflectMethod> and then keeps every exported method of every type
// that reaches an interface). One such function, gRPC's x/net/trace
// through html/template or go-cmp in the hub, made both executables a
// quarter larger and their resident memory with them (docs/
// architecture.md, "Executable size").
func TestExecutablesKeepMethodDeadCodeElimination(t *testing.T) {
	for _, pkg := range []string{"hub", "agent"} {
		t.Run(pkg, func(t *testing.T) {
			cmd := exec.Command("go", "build", "-tags", BuildTags, "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), pkg), "./"+pkg)
			cmd.Dir = "../.."
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("go build -ldflags=-dumpdep ./%s: %v\n%s", pkg, err, tail(stderr.String(), 20))
			}
			deps := stdout.String() + stderr.String()
			edges, flagged := readDumpdep(deps)
			if len(edges) == 0 {
				t.Fatalf("go build -ldflags=-dumpdep ./%s printed no dependency edge; cannot check:\n%s", pkg, tail(deps, 20))
			}
			for _, sym := range flagged {
				t.Errorf("./%s links %s, which calls methods by a name the linker cannot see; reached through:\n  %s", pkg, sym, strings.Join(chain(edges, sym), "\n  <- "))
			}
		})
	}
}

// readDumpdep reads the linker's -dumpdep lines ("caller -> callee", a
// name followed by flags such as <ReflectMethod>): who first reached each
// symbol, and the symbols flagged <ReflectMethod>.
func readDumpdep(out string) (reachedBy map[string]string, flagged []string) {
	reachedBy = map[string]string{}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		from, to, ok := strings.Cut(line, " -> ")
		if !ok {
			continue
		}
		for _, side := range []string{from, to} {
			if name, flags, _ := strings.Cut(side, " <"); strings.Contains(flags, "ReflectMethod>") && !seen[name] {
				seen[name] = true
				flagged = append(flagged, name)
			}
		}
		from, _, _ = strings.Cut(from, " <")
		to, _, _ = strings.Cut(to, " <")
		if _, ok := reachedBy[to]; !ok {
			reachedBy[to] = from
		}
	}
	return reachedBy, flagged
}

// chain follows who reached sym back towards the roots (at most 25 steps).
func chain(reachedBy map[string]string, sym string) []string {
	out := []string{sym}
	for range 25 {
		from, ok := reachedBy[sym]
		if !ok || from == "" || from == sym {
			break
		}
		out = append(out, from)
		sym = from
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func TestReadDumpdep(t *testing.T) {
	out := "main.main -> a.F\na.F -> b.G <ReflectMethod>\nb.G <ReflectMethod> -> reflect.Value.MethodByName\nmain.main -> b.G <ReflectMethod>\n"
	edges, flagged := readDumpdep(out)
	if len(flagged) != 1 || flagged[0] != "b.G" {
		t.Fatalf("flagged = %q, want [b.G]", flagged)
	}
	if got := strings.Join(chain(edges, "b.G"), " <- "); got != "b.G <- a.F <- main.main" {
		t.Errorf("chain = %q", got)
	}
}
