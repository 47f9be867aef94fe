// Package supervisor runs a testbed as a long-lived process for people and
// scripts: in the foreground until Ctrl-C (Run), or in the background (Up)
// with a state file and a loopback control endpoint that Down, Status and
// Member use. The testbed package itself is what tests use directly.
//
// The supervisor knows only the clusters. What runs on them comes in
// through Options.Start: cmd/testbed's --flotilla passes test/fleet's Demo,
// which starts the whole of Flotilla, so that the dependencies go one way
// (testbed <- fleet <- cmd/testbed) and nothing under test/testbed imports
// test/fleet.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Options configure a testbed run.
type Options struct {
	// Dir holds the clusters and the state file.
	Dir string
	// BinDir holds the control-plane binaries.
	BinDir string
	// Members is the number of member clusters.
	Members int
	// CRDDir holds CRDs to install into the hub; empty installs none.
	CRDDir string
	// Start, when set, starts what Run keeps running in place of the bare
	// clusters, for example the whole of Flotilla (test/fleet's Demo). Run
	// calls it with Dir made absolute; the clusters it starts are the ones
	// the control endpoint stops and starts.
	Start StartFunc
	// RunArgs are the flags Up passes on to the background `testbed run`
	// beyond the ones above: those that choose Start (--flotilla, --apply).
	RunArgs []string
}

// StartFunc starts what a supervisor keeps running, writing progress to out.
// On error it leaves nothing running.
type StartFunc func(ctx context.Context, opts Options, out io.Writer) (*System, error)

// System is what a supervisor keeps running: a testbed and whatever runs
// on it.
type System struct {
	// Testbed holds the clusters.
	Testbed *testbed.Testbed
	// Serve, when set, runs once the state file is written and the control
	// endpoint serves; Run returns when it does. Without it Run waits until
	// its context ends.
	Serve func(ctx context.Context) error
	// Stop stops everything that was started, saying so on the output.
	Stop func() error
}

// State is what a running supervisor writes to <dir>/testbed.json.
type State struct {
	PID      int            `json:"pid"`
	Control  string         `json:"control"`
	Clusters []ClusterState `json:"clusters"`
}

// ClusterState describes one cluster of a running testbed.
type ClusterState struct {
	Name       string         `json:"name"`
	Role       string         `json:"role"`
	Kubeconfig string         `json:"kubeconfig"`
	Host       string         `json:"host"`
	Region     string         `json:"region,omitempty"`
	Zone       string         `json:"zone,omitempty"`
	Provider   string         `json:"provider,omitempty"`
	Running    bool           `json:"running"`
	PIDs       map[string]int `json:"pids,omitempty"`
}

func statePath(dir string) string { return filepath.Join(dir, "testbed.json") }

// Run starts the testbed (or what opts.Start starts), writes the state file
// and serves the control endpoint until ctx ends or SIGINT / SIGTERM
// arrives; then it stops every process it started.
func Run(ctx context.Context, opts Options, out io.Writer) (err error) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	opts.Dir = dir
	start := opts.Start
	if start == nil {
		start = StartClusters
	}
	sys, err := start(ctx, opts, out)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, sys.Stop())
		_ = os.Remove(statePath(dir))
	}()
	tb := sys.Testbed

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: controlHandler(ctx, tb), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	state := snapshot(tb, ln.Addr().String())
	if err := writeJSON(statePath(dir), state); err != nil {
		return err
	}
	printSummary(out, state, dir)
	if sys.Serve != nil {
		return sys.Serve(ctx)
	}
	<-ctx.Done()
	return nil
}

var _ StartFunc = StartClusters

// StartClusters is the default Options.Start: a hub and opts.Members
// member clusters, with the CRDs of opts.CRDDir installed into the hub.
func StartClusters(ctx context.Context, opts Options, out io.Writer) (*System, error) {
	begin := time.Now()
	fmt.Fprintf(out, "starting a hub and %d member clusters in %s ...\n", opts.Members, opts.Dir)
	tb, err := testbed.Start(ctx, testbed.Config{
		Dir:      opts.Dir,
		BinDir:   opts.BinDir,
		Hub:      &testbed.ClusterSpec{Name: "hub"},
		Members:  testbed.DefaultMembers(opts.Members),
		Progress: out,
	})
	if err != nil {
		return nil, err
	}
	sys := &System{Testbed: tb, Stop: func() error {
		fmt.Fprintln(out, "stopping the testbed ...")
		err := tb.Stop()
		fmt.Fprintln(out, "testbed stopped")
		return err
	}}
	fmt.Fprintf(out, "all %d clusters ready in %s\n", len(tb.Clusters()), time.Since(begin).Round(time.Millisecond))
	if opts.CRDDir != "" {
		if err := installCRDs(tb, opts.CRDDir, out); err != nil {
			return nil, errors.Join(err, sys.Stop())
		}
	}
	return sys, nil
}

func installCRDs(tb *testbed.Testbed, dir string, out io.Writer) error {
	cfg, err := tb.Hub.RESTConfig()
	if err != nil {
		return err
	}
	crds, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true})
	if err != nil {
		return fmt.Errorf("installing CRDs from %s into the hub: %w", dir, err)
	}
	fmt.Fprintf(out, "installed %d CRDs into the hub\n", len(crds))
	return nil
}

func snapshot(tb *testbed.Testbed, control string) State {
	st := State{PID: os.Getpid(), Control: control}
	for _, c := range tb.Clusters() {
		role := "member"
		if c == tb.Hub {
			role = "hub"
		}
		st.Clusters = append(st.Clusters, ClusterState{
			Name: c.Spec.Name, Role: role, Kubeconfig: c.Kubeconfig, Host: c.Host(),
			Region: c.Spec.Region, Zone: c.Spec.Zone, Provider: c.Spec.Provider,
			Running: c.Running(), PIDs: c.PIDs(),
		})
	}
	return st
}

func printSummary(out io.Writer, st State, dir string) {
	fmt.Fprintln(out, "\nkubeconfigs:")
	for _, c := range st.Clusters {
		where := ""
		if c.Role == "member" {
			where = fmt.Sprintf("  (%s, %s, %s)", c.Region, c.Zone, c.Provider)
		}
		fmt.Fprintf(out, "  %-9s kubectl --kubeconfig %s get nodes%s\n", c.Name, c.Kubeconfig, where)
	}
	self := "testbed"
	if exe, err := os.Executable(); err == nil {
		self = exe
	}
	fmt.Fprintf(out, "\nsimulate losing a member:  %s stop-member member-2 --dir %s\n", self, dir)
	fmt.Fprintf(out, "bring it back:             %s start-member member-2 --dir %s\n", self, dir)
	fmt.Fprintln(out, "stop everything:           Ctrl-C here (or `make testbed-down` for a background testbed)")
}

// controlHandler serves POST /members/{name}/{stop|start} and GET /status.
func controlHandler(ctx context.Context, tb *testbed.Testbed) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(snapshot(tb, ""))
	})
	mux.HandleFunc("POST /members/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		m := tb.Member(r.PathValue("name"))
		if m == nil {
			http.Error(w, fmt.Sprintf("no member called %q", r.PathValue("name")), http.StatusNotFound)
			return
		}
		var err error
		switch r.PathValue("action") {
		case "stop":
			err = m.Stop()
		case "start":
			err = m.Start(ctx)
		default:
			http.Error(w, "action must be stop or start", http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "member %s: %s done\n", m.Spec.Name, r.PathValue("action"))
	})
	return mux
}

// Up starts `testbed run` in the background and waits until it is ready.
func Up(ctx context.Context, opts Options, out io.Writer) error {
	if st, err := readState(opts.Dir); err == nil && alive(st.PID) {
		return fmt.Errorf("a testbed is already running in %s (pid %d); `testbed down --dir %s` stops it", opts.Dir, st.PID, opts.Dir)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(statePath(opts.Dir))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(opts.Dir, "testbed.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"run", "--dir", opts.Dir, "--members", fmt.Sprint(opts.Members), "--crds", opts.CRDDir}
	if opts.BinDir != "" {
		args = append(args, "--bin", opts.BinDir)
	}
	args = append(args, opts.RunArgs...)
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A session of its own: the supervisor outlives this command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintf(out, "testbed starting in the background (pid %d, log %s) ...\n", cmd.Process.Pid, logPath)
	deadline := time.After(5 * time.Minute)
	for {
		if st, err := readState(opts.Dir); err == nil {
			abs, _ := filepath.Abs(opts.Dir)
			printSummary(out, st, abs)
			return nil
		}
		select {
		case err := <-exited:
			tail, _ := os.ReadFile(logPath)
			return fmt.Errorf("the testbed exited while starting (%v):\n%s", err, tail)
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("the testbed was not ready after 5 minutes; see %s", logPath)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Down stops a background testbed and waits for its supervisor to exit.
func Down(ctx context.Context, dir string, out io.Writer) error {
	st, err := readState(dir)
	if err != nil {
		fmt.Fprintf(out, "no testbed running in %s\n", dir)
		return nil
	}
	if !alive(st.PID) {
		_ = os.Remove(statePath(dir))
		fmt.Fprintf(out, "testbed in %s was not running; removed its stale state\n", dir)
		return nil
	}
	if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling the testbed (pid %d): %w", st.PID, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for alive(st.PID) {
		if time.Now().After(deadline) {
			// Its children die with it (Pdeathsig).
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
			return fmt.Errorf("the testbed (pid %d) did not stop in 60s and was killed", st.PID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Fprintln(out, "testbed stopped")
	return nil
}

// Status prints the clusters of a background testbed.
func Status(ctx context.Context, dir string, out io.Writer) error {
	st, err := readState(dir)
	if err != nil || !alive(st.PID) {
		return fmt.Errorf("no testbed running in %s", dir)
	}
	resp, err := control(ctx, http.MethodGet, st.Control, "/status")
	if err != nil {
		return err
	}
	var live State
	if err := json.Unmarshal([]byte(resp), &live); err != nil {
		return err
	}
	for _, c := range live.Clusters {
		state := "stopped"
		if c.Running {
			state = "running"
		}
		fmt.Fprintf(out, "%-9s %-6s %-7s %s  %s\n", c.Name, c.Role, state, c.Host, c.Kubeconfig)
	}
	return nil
}

// Member stops or starts one member of a background testbed.
func Member(ctx context.Context, dir, name, action string, out io.Writer) error {
	st, err := readState(dir)
	if err != nil || !alive(st.PID) {
		return fmt.Errorf("no testbed running in %s", dir)
	}
	resp, err := control(ctx, http.MethodPost, st.Control, "/members/"+name+"/"+action)
	if err != nil {
		return err
	}
	fmt.Fprint(out, resp)
	return nil
}

func control(ctx context.Context, method, addr, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("asking the testbed: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("testbed: %s", strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

func readState(dir string) (State, error) {
	var st State
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
