package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ResidentBytes is the resident set size (VmRSS) of process pid, read from
// /proc (Linux); pid 0 is this process.
func ResidentBytes(pid int) (int64, error) {
	m, err := Resident(pid)
	return m.RSS, err
}

// Memory is what a process holds in RAM, from /proc/<pid>/status.
type Memory struct {
	// RSS is the resident set size (VmRSS): Anon + File + shared memory.
	RSS int64
	// Anon is the anonymous memory resident (RssAnon): heap, stacks, the
	// Go runtime's own; what the process costs.
	Anon int64
	// File is the file-backed memory resident (RssFile): mostly the pages
	// of the executable that ran, clean and shared, which the kernel can
	// drop and read back.
	File int64
}

// Resident reads process pid's Memory (pid 0: this process).
func Resident(pid int) (Memory, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	found := false
	for line := range strings.SplitSeq(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst, found = &m.RSS, true
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("%s: cannot read %s %q", path, key, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%s: %s %q: %w", path, key, f[0], err)
		}
		*dst = kb << 10
	}
	if !found {
		return Memory{}, fmt.Errorf("%s has no VmRSS (a kernel thread or a zombie?)", path)
	}
	return m, nil
}
