package testutil

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSymbolPackage(t *testing.T) {
	for name, want := range map[string]string{
		"k8s.io/api/apps/v1.(*Deployment).Reset":         "k8s.io/api/apps/v1",
		"type:*k8s.io/api/apps/v1.Deployment":            "k8s.io/api/apps/v1",
		"type:.eq.k8s.io/api/core/v1.PodIP":              "k8s.io/api/core/v1",
		"go:itab.*net/http.Request,io.Reader":            "net/http",
		"runtime.mallocgc":                               "runtime",
		"go:string.*":                                    "[go:string]",
		"github.com/a/b/c.Func[go.shape.int]":            "github.com/a/b/c",
		"sigs.k8s.io/controller-runtime/pkg/client.init": "sigs.k8s.io/controller-runtime/pkg/client",
		"runtime.pclntab":                                "runtime",
	} {
		if got := SymbolPackage(name); got != want {
			t.Errorf("SymbolPackage(%q) = %q, want %q", name, got, want)
		}
	}
	for pkg, want := range map[string]string{
		"k8s.io/client-go/kubernetes/typed/apps/v1": "k8s.io/client-go/kubernetes",
		"k8s.io/apimachinery/pkg/runtime":           "k8s.io/apimachinery",
		"github.com/a/b/c":                          "github.com/a/b",
		"net/http":                                  "net",
		"[go:string]":                               "[go:string]",
	} {
		if got := ModuleOf(pkg); got != want {
			t.Errorf("ModuleOf(%q) = %q, want %q", pkg, got, want)
		}
	}
}

// A small program's resident executable pages (go test strips its own
// binary, so the program is built here, with its symbols): they add up to
// what the kernel counts for the executable's mappings, and the packages
// it ran (the runtime, fmt) hold some of them.
func TestResidentExecutable(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sleeper")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/sleeper").CombinedOutput(); err != nil {
		t.Fatalf("building testdata/sleeper: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("sleeper did not start: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	// The runtime may still touch a page or two just after main starts:
	// read until the pagemap and smaps agree on a sleeping process.
	var r ExecutableResidence
	var kernel int64
	for try := 0; ; try++ {
		var err error
		if r, err = ResidentExecutable(pid); err != nil {
			t.Fatal(err)
		}
		kernel = smapsRss(t, pid, r.Executable)
		if kernel == r.File+r.Anon {
			break
		}
		if try == 20 {
			t.Fatalf("smaps counts %d resident bytes of %s, the pagemap %d file + %d written (20 reads 100 ms apart)", kernel, r.Executable, r.File, r.Anon)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var sum int64
	found := map[string]bool{}
	for _, p := range r.Packages {
		sum += p.Bytes
		found[p.Package] = true
	}
	// Each package's share is rounded to a byte.
	if d := sum - r.File; d < -int64(len(r.Packages)) || d > int64(len(r.Packages)) {
		t.Errorf("the packages' bytes add up to %d, the resident file pages to %d", sum, r.File)
	}
	for _, pkg := range []string{"runtime", "fmt", "net/http"} {
		if !found[pkg] {
			t.Errorf("no resident page attributed to %s; have %v", pkg, r.Packages[:min(10, len(r.Packages))])
		}
	}
	t.Logf("%s: %d KiB file-backed resident, %d KiB written; top: %v", r.Executable, r.File>>10, r.Anon>>10, r.Packages[:min(5, len(r.Packages))])
}

// smapsRss is the kernel's count of the resident bytes of the mappings
// of path in process pid (the Rss lines of its smaps).
func smapsRss(t *testing.T, pid int, path string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kernel int64
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4 {
			// A mapping's first line; an anonymous one names no file.
			in = len(f) >= 6 && strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)") == path
			continue
		}
		if in && len(f) == 3 && f[0] == "Rss:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps: %q: %v", line, err)
			}
			kernel += kb << 10
		}
	}
	return kernel
}
