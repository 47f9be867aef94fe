// Command runc-capfilter runs runc with every capability that this machine
// cannot grant removed from the container's process spec.
//
// Docker's --privileged asks for every capability it knows. On a host whose
// own bounding set lacks one (some sandboxed VMs withhold CAP_SYS_RESOURCE
// even from root), runc then fails with "unable to apply caps: operation not
// permitted", so no privileged container, and so no kind node, can start.
// Registered as a Docker runtime, this filter drops from the bundle's
// config.json (runc create / run) or the exec's process file (runc exec
// --process) exactly the capabilities that are missing from its own bounding
// set, which no container on this host could hold anyway, and then execs
// runc with the same arguments. Specs that ask only for grantable
// capabilities pass through unchanged.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames maps capability numbers to the names OCI specs use.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD",
	"CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	runc := os.Getenv("RUNC_CAPFILTER_RUNC")
	if runc == "" {
		var err error
		if runc, err = exec.LookPath("runc"); err != nil {
			fail(fmt.Errorf("runc not found in PATH (set RUNC_CAPFILTER_RUNC): %w", err))
		}
	}
	args := os.Args[1:]
	if spec, bundle := specFile(args); spec != "" {
		lacks, err := missing()
		if err != nil {
			fail(err)
		}
		if err := filter(spec, bundle, lacks); err != nil {
			fail(err)
		}
	}
	if err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ()); err != nil {
		fail(fmt.Errorf("exec %s: %w", runc, err))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "runc-capfilter:", err)
	os.Exit(1)
}

// specFile returns the file holding the process spec for this runc
// invocation and whether it is a whole bundle config (true) or a bare
// process (false); "" when the command starts no process.
func specFile(args []string) (string, bool) {
	cmd := ""
	bundle, process := "", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func(name string) (string, bool) {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v, true
			}
			if a == name && i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		if v, ok := val("--bundle"); ok {
			bundle = v
			continue
		}
		if v, ok := val("-b"); ok {
			bundle = v
			continue
		}
		if v, ok := val("--process"); ok {
			process = v
			continue
		}
		if v, ok := val("-p"); ok && cmd == "exec" {
			process = v
			continue
		}
		// Global options that take a value, before the command.
		if cmd == "" {
			if _, ok := val("--root"); ok {
				continue
			}
			if _, ok := val("--log"); ok {
				continue
			}
			if _, ok := val("--log-format"); ok {
				continue
			}
			if _, ok := val("--criu"); ok {
				continue
			}
			if !strings.HasPrefix(a, "-") {
				cmd = a
			}
		}
	}
	switch cmd {
	case "create", "run":
		if bundle == "" {
			bundle = "."
		}
		return filepath.Join(bundle, "config.json"), true
	case "exec":
		if process != "" {
			return process, false
		}
	}
	return "", false
}

// missing returns the names of the capabilities this process's bounding set
// lacks. Names this program does not know (capabilities newer than it) are
// never in it, so they pass through.
func missing() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		v, ok := strings.CutPrefix(s.Text(), "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", v, err)
		}
		lacks := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<uint(i)) == 0 {
				lacks[name] = true
			}
		}
		return lacks, nil
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// filter rewrites the spec in path without the capabilities in lacks. It
// leaves the file untouched when nothing is dropped, and keeps every field
// it does not know.
func filter(path string, bundle bool, lacks map[string]bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	proc := doc
	if bundle {
		p, ok := doc["process"]
		if !ok {
			return nil
		}
		proc = map[string]json.RawMessage{}
		if err := json.Unmarshal(p, &proc); err != nil {
			return fmt.Errorf("%s: process: %w", path, err)
		}
	}
	c, ok := proc["capabilities"]
	if !ok {
		return nil
	}
	var caps map[string][]string
	if err := json.Unmarshal(c, &caps); err != nil {
		return fmt.Errorf("%s: capabilities: %w", path, err)
	}
	dropped := false
	for set, names := range caps {
		kept := names[:0]
		for _, n := range names {
			if lacks[n] {
				dropped = true
			} else {
				kept = append(kept, n)
			}
		}
		caps[set] = kept
	}
	if !dropped {
		return nil
	}
	if proc["capabilities"], err = json.Marshal(caps); err != nil {
		return err
	}
	if bundle {
		if doc["process"], err = json.Marshal(proc); err != nil {
			return err
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
