package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// runStream holds one stream until it ends. healthy says it got as far as
// a complete snapshot and was not replaced, which resets the backoff.
func (c *Client) runStream(ctx context.Context) (healthy bool, err error) {
	held, err := c.cfg.Applier.Held(ctx)
	if err != nil {
		return false, fmt.Errorf("listing the Works this member holds: %w", err)
	}
	hello := c.hello(ctx, held)

	conn, err := c.dial()
	if err != nil {
		return false, fmt.Errorf("connecting to %s: %w", c.cfg.Address, err)
	}
	defer conn.Close()

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, err := syncv1.NewSyncClient(conn).Connect(sctx, grpc.ForceCodecV2(wire.Codec{}))
	if err != nil {
		return false, err
	}
	c.connects.Add(1)
	c.connected.Store(true)
	c.log.V(1).Info("sync stream open", "held", len(held))

	// The latest status of every Work goes out again on each new stream:
	// reports in flight when the last one dropped may never have arrived.
	c.status.resendAll()

	var wg sync.WaitGroup
	defer wg.Wait()
	// Cancel before waiting (defers run last-in first-out): cancelling the
	// stream's context unblocks the goroutines' Send and Recv.
	defer cancel(nil)

	sendErr := make(chan error, 1)
	wg.Go(func() { sendErr <- c.sendLoop(sctx, stream, hello) })

	msgs := make(chan hubMessage)
	recvErr := make(chan error, 1)
	wg.Go(func() {
		for {
			var raw wire.Raw
			if err := stream.RecvMsg(&raw); err != nil {
				recvErr <- err
				return
			}
			m, err := decodeHubMessage(raw, c.cfg.Cluster)
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-sctx.Done():
				return
			}
		}
	})

	st := &streamState{r: newRetries(c.cfg.InitialBackoff, c.cfg.MaxApplyBackoff)}
	r := st.r
	for {
		var retryC <-chan time.Time
		if t := r.timer(); t != nil {
			retryC = t.C
		}
		select {
		case m := <-msgs:
			c.handle(ctx, st, m)
		case <-retryC:
			c.retryDue(ctx, st)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "hub closed the stream")
			}
			return c.snapshotDone.Load() && status.Code(err) != codes.Aborted, err
		case err := <-sendErr:
			return c.snapshotDone.Load(), err
		case <-ctx.Done():
			r.stop()
			return false, ctx.Err()
		}
	}
}

func (c *Client) hello(ctx context.Context, held []HeldWork) *syncv1.AgentMessage {
	h := &syncv1.Hello{
		AgentVersion:      c.cfg.AgentVersion,
		Instance:          c.cfg.Instance,
		KubernetesVersion: c.cfg.KubernetesVersion,
		Held:              make([]*syncv1.HeldWork, 0, len(held)),
	}
	for _, w := range held {
		h.Held = append(h.Held, &syncv1.HeldWork{Name: w.Name, Uid: w.UID, Generation: w.Generation})
	}
	h.ResourceSummary = c.resources(ctx)
	return &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: h}}
}

// resources asks the provider for a summary, giving it at most one
// heartbeat interval. A failure sends no summary rather than no heartbeat:
// the heartbeat's news is that the agent lives.
func (c *Client) resources(ctx context.Context) []byte {
	if c.cfg.Resources == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.HeartbeatInterval)
	defer cancel()
	rs, err := c.cfg.Resources(ctx)
	if err != nil {
		c.log.Error(err, "computing the resource summary")
		return nil
	}
	data, err := wire.EncodeResourceSummary(rs)
	if err != nil {
		c.log.Error(err, "encoding the resource summary")
		return nil
	}
	return data
}

// sendLoop is the only goroutine that sends on the stream: the hello,
// then status reports as they come and a heartbeat on every tick.
func (c *Client) sendLoop(ctx context.Context, stream syncv1.Sync_ConnectClient, hello *syncv1.AgentMessage) error {
	if err := stream.Send(hello); err != nil {
		return err
	}
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	namespace := v1alpha1.ClusterNamespace(c.cfg.Cluster)
	for {
		for {
			name, st, ok := c.status.pop()
			if !ok {
				break
			}
			data, err := wire.EncodeWorkStatus(st)
			if err != nil {
				c.log.Error(err, "encoding status; dropping this report", "work", name)
				continue
			}
			msg := &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Status{Status: &syncv1.StatusReport{
				Namespace: namespace, Name: name, Status: data,
			}}}
			if err := stream.Send(msg); err != nil {
				// The report stays the latest for its Work and goes out
				// again on the next stream (resendAll).
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.status.ready:
		case <-tick.C:
			msg := &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Heartbeat{Heartbeat: &syncv1.Heartbeat{
				ResourceSummary: c.resources(ctx),
			}}}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
	}
}

// want is what the hub wants the member to hold, as far as this stream
// has said: nil until the snapshot completes (before that a Work missing
// may just not have been sent yet), then the snapshot's keep list changed
// by every WorkUpsert and WorkDelete received after it.
type want map[string]bool

// names lists the Works wanted now, sorted.
func (w want) names() []string {
	out := make([]string, 0, len(w))
	for n := range w {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// streamState is what one stream's message loop keeps.
type streamState struct {
	r    *retries
	want want
}

// handle hands one hub message to the applier.
func (c *Client) handle(ctx context.Context, st *streamState, m hubMessage) {
	switch m.kind {
	case kindUpsert:
		st.r.forget(m.upsert.Name)
		if st.want != nil {
			st.want[m.upsert.Name] = true
		}
		c.apply(ctx, st.r, m.upsert)
	case kindDelete:
		st.r.forget(m.delete)
		delete(st.want, m.delete)
		c.remove(ctx, st.r, m.delete)
	case kindSnapshotComplete:
		st.want = make(want, len(m.keep))
		for _, n := range m.keep {
			st.want[n] = true
		}
		c.complete(ctx, st, m.keep)
	}
}

func (c *Client) apply(ctx context.Context, r *retries, w *v1alpha1.Work) {
	if err := c.cfg.Applier.Apply(ctx, w); err != nil {
		if ctx.Err() == nil {
			c.log.Error(err, "applying Work; will retry", "work", w.Name, "generation", w.Generation)
			r.add(w.Name, retry{work: w})
		}
	}
}

func (c *Client) remove(ctx context.Context, r *retries, name string) {
	c.status.forget(name)
	if err := c.cfg.Applier.Delete(ctx, name); err != nil {
		if ctx.Err() == nil {
			c.log.Error(err, "deleting Work; will retry", "work", name)
			r.add(name, retry{delete: true})
		}
	}
}

func (c *Client) complete(ctx context.Context, st *streamState, keep []string) {
	// A failed apply of a Work the hub no longer wants must not be
	// retried; the prune below removes it.
	st.r.keepOnly(keep)
	st.r.forget(pruneKey)
	c.status.keepOnly(keep)
	c.prune(ctx, st, keep)
}

// prune calls SnapshotComplete with keep and, when it fails, schedules a
// retry.
//
// The retry does not replay keep: it asks again with what the hub wants at
// the time of the retry (st.want), because Works may have been upserted
// (and applied) since the attempt that failed, and pruning with the old
// list would delete them while the hub shows them running. Ending the
// stream on a failed prune would be correct too, but one object the member
// refuses to delete would then cost a reconnect and a fresh snapshot on
// every attempt, with status re-sent each time; recomputing keeps the
// stream and stays exact, since st.want follows every message the hub
// sent on it.
func (c *Client) prune(ctx context.Context, st *streamState, keep []string) {
	if err := c.cfg.Applier.SnapshotComplete(ctx, keep); err != nil {
		if ctx.Err() == nil {
			c.log.Error(err, "pruning after the snapshot; will retry", "keep", len(keep))
			st.r.add(pruneKey, retry{prune: true})
		}
		return
	}
	c.snapshotDone.Store(true)
	c.log.V(1).Info("snapshot complete", "works", len(keep))
}

// retryDue retries every failed call whose time has come.
func (c *Client) retryDue(ctx context.Context, st *streamState) {
	r := st.r
	for _, name := range r.due(time.Now()) {
		rt, ok := r.take(name)
		if !ok {
			continue
		}
		switch {
		case name == pruneKey:
			// What the hub wants now, not what it wanted when the prune
			// first failed: see prune.
			keep := st.want.names()
			c.status.keepOnly(keep)
			if err := c.cfg.Applier.SnapshotComplete(ctx, keep); err != nil {
				if ctx.Err() == nil {
					r.again(name, rt)
				}
				continue
			}
			c.snapshotDone.Store(true)
		case rt.delete:
			if err := c.cfg.Applier.Delete(ctx, name); err != nil && ctx.Err() == nil {
				r.again(name, rt)
			}
		default:
			if err := c.cfg.Applier.Apply(ctx, rt.work); err != nil && ctx.Err() == nil {
				r.again(name, rt)
			}
		}
	}
}
