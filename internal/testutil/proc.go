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
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: cannot read VmRSS %q", path, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: VmRSS %q: %w", path, f[0], err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%s has no VmRSS (a kernel thread or a zombie?)", path)
}
