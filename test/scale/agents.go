package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// shardSpec is what one agent process runs: the simulated members and how
// they behave. The harness writes it as JSON and starts the process with
// -agent-shard pointing at it.
type shardSpec struct {
	Address           string        `json:"address"`
	CAPEM             []byte        `json:"caPEM"`
	ReadyDelay        time.Duration `json:"readyDelay"`
	HeartbeatInterval time.Duration `json:"heartbeatInterval"`
	// ConnectJitter spreads the first connections of the shard's members
	// uniformly over this long (a connect storm with jitter).
	ConnectJitter time.Duration `json:"connectJitter"`
	Members       []shardMember `json:"members"`
}

type shardMember struct {
	Name    string `json:"name"`
	CertPEM []byte `json:"certPEM"`
	KeyPEM  []byte `json:"keyPEM"`
}

// shardStats is one agent process's answer to "stats".
type shardStats struct {
	Members int `json:"members"`
	// Connected and Synced count members with a stream open, and with its
	// snapshot complete.
	Connected int `json:"connected"`
	Synced    int `json:"synced"`
	// Connects, Snapshots and Resumes sum the clients' State.
	Connects  int64 `json:"connects"`
	Snapshots int64 `json:"snapshots"`
	Resumes   int64 `json:"resumes"`
	Pending   int   `json:"pending"`
	// Applies ... Reports count the members' Applier calls and status
	// reports since the process started.
	Applies int64 `json:"applies"`
	Deletes int64 `json:"deletes"`
	Orphans int64 `json:"orphans"`
	Prunes  int64 `json:"prunes"`
	Reports int64 `json:"reports"`
	// Works is the number of Works held, summed over the members.
	Works int `json:"works"`
	// SyncedAfter counts members whose current stream completed its
	// snapshot and which connected more than once (resynced after a drop).
	RSSBytes int64 `json:"rssBytes"`
}

// imageStats answers "image <name>".
type imageStats struct {
	Works int   `json:"works"`
	Last  int64 `json:"last"`
}

// agentRun is one simulated member's client in a shard process.
type agentRun struct {
	member *simMember
	client *syncclient.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// runShard is the agent process: it runs the members of the spec in file
// and answers commands, one per line on stdin, with one JSON line on
// stdout. It exits when stdin closes or on "exit", after stopping every
// client.
func runShard(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var spec shardSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(spec.CAPEM) {
		return errors.New("the shard spec's CA is not PEM")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &counters{}
	runs := map[string]*agentRun{}
	var order []string
	for _, m := range spec.Members {
		cert, err := tls.X509KeyPair(m.CertPEM, m.KeyPEM)
		if err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
		sm := newSimMember(m.Name, spec.ReadyDelay, c)
		cl, err := syncclient.New(syncclient.Config{
			Address: spec.Address,
			TLS:     &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: roots},
			Applier: sm, Resources: resources, Logger: logr.Discard(),
			AgentVersion: "scale-sim", Instance: m.Name + "-0", KubernetesVersion: "v1.37.2",
			HeartbeatInterval: spec.HeartbeatInterval,
		})
		if err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
		sm.reporter = cl.ReportStatus
		runs[m.Name] = &agentRun{member: sm, client: cl}
		order = append(order, m.Name)
	}
	start := func(r *agentRun, delay time.Duration) {
		rctx, rcancel := context.WithCancel(ctx)
		r.cancel, r.done = rcancel, make(chan struct{})
		go func() {
			defer close(r.done)
			if delay > 0 {
				select {
				case <-time.After(delay):
				case <-rctx.Done():
					return
				}
			}
			_ = r.client.Run(rctx)
		}()
	}
	stop := func(r *agentRun) {
		if r.cancel != nil {
			r.cancel()
			<-r.done
			r.cancel = nil
		}
	}
	for _, name := range order {
		var d time.Duration
		if spec.ConnectJitter > 0 {
			d = rand.N(spec.ConnectJitter)
		}
		start(runs[name], d)
	}
	defer func() {
		var wg sync.WaitGroup
		for _, r := range runs {
			wg.Add(1)
			go func() { defer wg.Done(); stop(r) }()
		}
		wg.Wait()
	}()

	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var answer any
		switch {
		case f[0] == "stats":
			st := shardStats{Members: len(runs)}
			for _, r := range runs {
				s := r.client.State()
				if s.Connected {
					st.Connected++
				}
				if s.Connected && s.SnapshotComplete {
					st.Synced++
				}
				st.Connects += s.Connects
				st.Snapshots += s.Snapshots
				st.Resumes += s.Resumes
				st.Pending += s.PendingReports
				st.Works += r.member.workCount()
			}
			st.Applies, st.Deletes, st.Orphans = c.applies.Load(), c.deletes.Load(), c.orphans.Load()
			st.Prunes, st.Reports = c.prunes.Load(), c.statusReports.Load()
			st.RSSBytes = selfRSS()
			answer = st
		case f[0] == "applied":
			m := map[string]int64{}
			for _, r := range runs {
				r.member.firstApplied(m)
			}
			answer = m
		case f[0] == "image" && len(f) == 2:
			var st imageStats
			for _, r := range runs {
				n, last := r.member.imageCount(f[1])
				st.Works += n
				st.Last = max(st.Last, last)
			}
			answer = st
		case (f[0] == "stop" || f[0] == "start") && len(f) == 2:
			r := runs[f[1]]
			if r == nil {
				answer = map[string]string{"error": "no member " + f[1] + " in this shard"}
				break
			}
			if f[0] == "stop" {
				stop(r)
			} else if r.cancel == nil {
				start(r, 0)
			}
			answer = map[string]string{"ok": f[0] + " " + f[1]}
		case f[0] == "exit":
			return nil
		default:
			answer = map[string]string{"error": "unknown command " + in.Text()}
		}
		if err := out.Encode(answer); err != nil {
			return err
		}
	}
	return in.Err()
}

// selfRSS is this process's resident set size in bytes (0 if unknown).
func selfRSS() int64 { return rssOf(os.Getpid()) }

// shard is the harness's handle on one agent process.
type shard struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  *bufio.Scanner
	members map[string]bool
	mu      sync.Mutex
	done    chan struct{}
}

// startShard starts an agent process for spec, logging its stderr to
// logPath.
func startShard(name, specFile, logPath string, members []string) (*shard, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-agent-shard", specFile)
	cmd.Stderr = logFile
	// The kernel stops the shard if the harness dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting agent process %s: %w", name, err)
	}
	s := &shard{name: name, cmd: cmd, stdin: stdin, stdout: bufio.NewScanner(stdout), members: map[string]bool{}, done: make(chan struct{})}
	s.stdout.Buffer(make([]byte, 1<<20), 256<<20)
	for _, m := range members {
		s.members[m] = true
	}
	go func() { _ = cmd.Wait(); logFile.Close(); close(s.done) }()
	return s, nil
}

// call sends one command and decodes the answer into out.
func (s *shard) call(command string, out any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintln(s.stdin, command); err != nil {
		return fmt.Errorf("agent process %s: %w", s.name, err)
	}
	if !s.stdout.Scan() {
		return fmt.Errorf("agent process %s ended (see its log): %v", s.name, s.stdout.Err())
	}
	line := s.stdout.Bytes()
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &e) == nil && e.Error != "" {
		return fmt.Errorf("agent process %s: %s", s.name, e.Error)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(line, out)
}

// stop asks the process to exit and kills it if it has not within 20 s.
func (s *shard) stop() {
	s.mu.Lock()
	_, _ = fmt.Fprintln(s.stdin, "exit")
	_ = s.stdin.Close()
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// agents is every agent process of a run.
type agents struct{ shards []*shard }

// stats sums every shard's stats.
func (a *agents) stats() (shardStats, error) {
	var sum shardStats
	for _, s := range a.shards {
		var st shardStats
		if err := s.call("stats", &st); err != nil {
			return sum, err
		}
		sum.Members += st.Members
		sum.Connected += st.Connected
		sum.Synced += st.Synced
		sum.Connects += st.Connects
		sum.Snapshots += st.Snapshots
		sum.Resumes += st.Resumes
		sum.Pending += st.Pending
		sum.Applies += st.Applies
		sum.Deletes += st.Deletes
		sum.Orphans += st.Orphans
		sum.Prunes += st.Prunes
		sum.Reports += st.Reports
		sum.Works += st.Works
		sum.RSSBytes += st.RSSBytes
	}
	return sum, nil
}

// image sums the Works holding image over every shard.
func (a *agents) image(image string) (imageStats, error) {
	var sum imageStats
	for _, s := range a.shards {
		var st imageStats
		if err := s.call("image "+image, &st); err != nil {
			return sum, err
		}
		sum.Works += st.Works
		sum.Last = max(sum.Last, st.Last)
	}
	return sum, nil
}

// applied is, per Work name, when the last member to apply it first did.
func (a *agents) applied() (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range a.shards {
		var m map[string]int64
		if err := s.call("applied", &m); err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] = max(out[k], v)
		}
	}
	return out, nil
}

// member sends "stop" or "start" to the shard running member.
func (a *agents) member(verb, member string) error {
	for _, s := range a.shards {
		if s.members[member] {
			return s.call(verb+" "+member, nil)
		}
	}
	return fmt.Errorf("no agent process runs member %s", member)
}

func (a *agents) stop() {
	var wg sync.WaitGroup
	for _, s := range a.shards {
		wg.Add(1)
		go func() { defer wg.Done(); s.stop() }()
	}
	wg.Wait()
}

// shardKeyPair is a member's agent credentials in PEM.
func shardKeyPair(kp *pki.KeyPair) (certPEM, keyPEM []byte, err error) {
	keyPEM, err = kp.KeyPEM()
	return kp.CertPEM(), keyPEM, err
}
