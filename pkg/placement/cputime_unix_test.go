//go:build unix

package placement

import (
	"syscall"
	"time"
)

// cpuTime is the process's user plus system CPU time. Benchmarks report it
// per op beside wall time because the machines they run on are shared: CPU
// time does not count the time spent waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
