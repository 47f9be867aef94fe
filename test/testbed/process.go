package testbed

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is one binary run by the testbed (or by tools built on it): its
// output goes to a log file, it runs in a process group of its own, and the
// kernel kills it if the process that started it dies.
type Process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	// logPath is where the process's output goes, for error messages.
	logPath string
	done    chan struct{}
	err     error // the exit error, valid once done is closed
}

// StartProcess runs bin with args and extra environment variables env
// (KEY=VALUE), its output appended to logPath.
func StartProcess(name, bin string, args, env []string, logPath string) (*Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s binary %s not found (run `make testbed-bin`): %w", name, bin, err)
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// A process group of its own keeps a terminal's Ctrl-C away from the
		// child, so the testbed decides the stop order (etcd last).
		Setpgid: true,
		// If the process that started us dies without cleaning up, the
		// kernel kills the child: a crashed test leaves nothing behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, log: logFile, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// logTail is the end of the process's log (at most n lines), so that an
// error about a process that died says why without opening its log.
func (p *Process) logTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 4096
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-window, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line is cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// exited reports whether the process has ended.
func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to grace, then SIGKILLs and waits.
func (p *Process) Stop(grace time.Duration) error {
	return p.Signal(syscall.SIGTERM, grace)
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() error { return p.Signal(syscall.SIGKILL, 0) }

// Signal sends sig and waits up to grace for the process to end, then
// SIGKILLs it and waits.
func (p *Process) Signal(sig syscall.Signal, grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.name, p.Pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s (pid %d): %w", p.name, p.Pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
	}
}
