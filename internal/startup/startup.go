// Package startup holds what the hub and the agent share about their first
// calls to their own apiserver at start.
//
// A process that starts in a pod on a node that has just started may meet
// a cluster that is not quite there: until kube-proxy has written its
// rules, the in-cluster Service address of the apiserver refuses
// connections (or is answered by whatever lies beyond the node). A first
// call that gave up at once ended the process, and the kubelet's
// CrashLoopBackOff then kept it down for up to 5 minutes. Retry tries
// such a call again, for as long as its context allows, while the error
// says the apiserver could not be reached; any answer of the apiserver's
// own (401, 403, 404, a conflict) ends it at once.
package startup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Timeout bounds a first call at start, its retries included.
const Timeout = 30 * time.Second

// Retry calls fn until it returns no error or one Unreachable does not
// match, waiting 100 ms doubling to 2 s between calls, and until ctx ends;
// then it returns fn's last result, its error with the number of calls
// when ctx ended the retries. what names the call in the log.
func Retry[T any](ctx context.Context, log logr.Logger, what string, fn func(context.Context) (T, error)) (T, error) {
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := fn(ctx)
		if err == nil || !Unreachable(err) {
			return v, err
		}
		log.Info("the apiserver cannot be reached yet; trying again", "call", what, "attempt", attempt, "in", delay.String(), "error", err.Error())
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (tried %d times)", err, attempt)
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Unreachable is true for errors that say the apiserver could not be
// reached or could not answer now: refused, reset, cut or timed-out
// connections, a server whose certificate does not verify (not the
// apiserver: what answers an in-cluster address kube-proxy does not
// translate yet; a real certificate problem still ends the process, once
// the context does), and 429, 500, 503 and 504 answers. The caller's own
// deadline or cancellation is not.
func Unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) {
		return true
	}
	var ue *url.Error
	if errors.As(err, &ue) && utilnet.IsProbableEOF(ue.Err) {
		return true
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}
