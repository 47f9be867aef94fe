package fleet

import (
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Supervised is a process restarted a second after it exits, until Stop.
type Supervised struct {
	Name string
	// MetricsAddr is where its /metrics is served.
	MetricsAddr string
	// MetricsToken is the bearer token that may read it over HTTPS (""
	// when it serves plain HTTP).
	MetricsToken string
	// PprofAddr is where its /debug/pprof is served ("" when it is not:
	// Config.Pprof).
	PprofAddr string

	bin     string
	args    []string
	env     []string
	logPath string

	mu       sync.Mutex
	proc     *testbed.Process
	stopping bool
	restarts int
	done     chan struct{}
}

// Supervise starts bin and keeps it running.
func Supervise(name, bin string, args, env []string, logPath string) (*Supervised, error) {
	s := &Supervised{Name: name, bin: bin, args: args, env: env, logPath: logPath, done: make(chan struct{})}
	p, err := testbed.StartProcess(name, bin, args, env, logPath)
	if err != nil {
		return nil, err
	}
	s.proc = p
	go s.watch()
	return s, nil
}

func (s *Supervised) watch() {
	defer close(s.done)
	for {
		s.mu.Lock()
		p := s.proc
		s.mu.Unlock()
		<-p.Done()
		// Like a kubelet's restart: a pause, then the same command.
		time.Sleep(time.Second)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		next, err := testbed.StartProcess(s.Name, s.bin, s.args, s.env, s.logPath)
		if err != nil {
			s.mu.Unlock()
			return
		}
		s.proc = next
		s.restarts++
		s.mu.Unlock()
	}
}

// Pid is the current process's id.
func (s *Supervised) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.Pid()
}

// Process is the current process: the one running now, or the last one
// if it ended and the supervisor has not started the next yet.
func (s *Supervised) Process() *testbed.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Restarts is how often the process was started again.
func (s *Supervised) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Kill SIGKILLs the current process; the supervisor starts it again.
func (s *Supervised) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	return p.Kill()
}

// Restart signals the current process and waits for it to end; the
// supervisor starts it again.
func (s *Supervised) Restart(sig syscall.Signal) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	return p.Signal(sig, 15*time.Second)
}

// Stop stops the process for good.
func (s *Supervised) Stop() error {
	s.mu.Lock()
	s.stopping = true
	p := s.proc
	s.mu.Unlock()
	err := p.Stop(15 * time.Second)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("supervisor of %s did not end", s.Name)
	}
	// A restart may have raced with Stop: stop what it started.
	s.mu.Lock()
	last := s.proc
	s.mu.Unlock()
	if last != p {
		err = last.Stop(15 * time.Second)
	}
	return err
}
