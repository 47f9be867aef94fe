// Package reexec starts a leader-elected process over, in place, when it
// lost its leader Lease.
//
// controller-runtime's manager stops when its Lease is lost (a renewal
// not done within the renew deadline, as when the apiserver stalls for
// a few seconds) and the process is expected to exit: its controllers
// cannot be stopped and waited for one by one, and a replica that no
// longer leads must not act. An exit in a pod is restarted by the
// kubelet with CrashLoopBackOff, whose delay doubles with each restart
// up to 5 minutes; so a member whose apiserver stalls now and then could
// be left with no agent for minutes, far outside the timing budget
// (docs/architecture.md). StartOver replaces the process image with its
// own executable, its arguments and its environment (execve): every
// goroutine of the old manager ends at once, as with an exit, and the
// new process campaigns for the Lease again within a second, with no
// back-off. The count of such restarts is passed on in the environment
// (EnvRestarts) and served as flotilla_lost_lease_restarts_total.
package reexec

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// EnvRestarts carries the number of in-place restarts to the new process.
const EnvRestarts = "FLOTILLA_LOST_LEASE_RESTARTS"

var restarts = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "flotilla_lost_lease_restarts_total",
	Help: "Times this process lost its leader Lease and started over in place (an exec of its own executable, no container restart), since its container or supervisor started it.",
})

func init() {
	if n := Restarts(); n > 0 {
		restarts.Add(float64(n))
	}
}

// Collectors are the package's metrics, for the caller to register.
func Collectors() []prometheus.Collector { return []prometheus.Collector{restarts} }

// Restarts is how many times this process started over in place before
// (0 when EnvRestarts is unset or not a count).
func Restarts() int {
	n, err := strconv.Atoi(os.Getenv(EnvRestarts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// LostLease reports whether err is controller-runtime's manager stopping
// because it lost its leader Lease. The manager gives no typed error; its
// message is pinned by the tests that lose a Lease on purpose.
func LostLease(err error) bool {
	return err != nil && strings.Contains(err.Error(), "leader election lost")
}

// AfterRun is what a main does with the error its manager returned: when
// the manager stopped for a lost Lease and not for ctx (a signal), it
// logs so and starts over in place, returning only if the exec failed;
// otherwise it returns err as it is.
func AfterRun(ctx context.Context, log logr.Logger, err error) error {
	if !LostLease(err) || ctx.Err() != nil {
		return err
	}
	log.Error(err, "lost the leader Lease: starting over in place", "lostLeaseRestarts", Restarts()+1)
	if xerr := StartOver(); xerr != nil {
		return fmt.Errorf("%w (starting over in place failed: %v)", err, xerr)
	}
	return err
}

// StartOver replaces this process with a new run of its own executable,
// same arguments, same environment but EnvRestarts one higher. It
// returns only if the exec failed.
func StartOver() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, Environ(os.Environ(), Restarts()+1))
}

// Environ is env with EnvRestarts set to n (replacing any value).
func Environ(env []string, n int) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvRestarts+"=") {
			out = append(out, kv)
		}
	}
	return append(out, EnvRestarts+"="+strconv.Itoa(n))
}
