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

	var wg sync.WaitGroup
	defer wg.Wait()
	// Cancel before waiting (defers run last-in first-out): cancelling the
	// stream's context unblocks the goroutines' Send and Recv.
	defer cancel(nil)

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

	// The hub speaks first and says who it is. Nothing is said about what
	// this member holds, and nothing is applied or deleted, before the
	// agent has checked that it serves that hub.
	hh, err := c.awaitHubHello(sctx, msgs, recvErr)
	if err != nil {
		return false, err
	}
	if err := c.admit(ctx, hh); err != nil {
		var mismatch *FleetMismatchError
		if errors.As(err, &mismatch) {
			c.refuse(stream, mismatch, recvErr)
		}
		return false, err
	}
	c.refusal.Store(nil)

	held, err := c.cfg.Applier.Held(ctx)
	if err != nil {
		return false, fmt.Errorf("listing the Works this member holds: %w", err)
	}
	hello := c.hello(ctx, held)
	c.connected.Store(true)
	c.log.V(1).Info("sync stream open", "held", len(held), "fleet", hh.fleetID, "epoch", hh.epoch)

	// The latest status of every Work goes out again on each new stream:
	// reports in flight when the last one dropped may never have arrived.
	c.status.resendAll()

	st := &streamState{
		r:       newRetries(c.cfg.InitialBackoff, c.cfg.MaxApplyBackoff),
		epoch:   hh.epoch,
		resumed: slices.ContainsFunc(held, func(w HeldWork) bool { return w.Generation > 0 }),
		reports: newMailbox(),
		gone:    newGoneQueue(),
	}
	sendErr := make(chan error, 1)
	wg.Go(func() { sendErr <- c.sendLoop(sctx, stream, hello, st.reports, st.gone) })

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

// awaitHubHello waits for the hub's first message, which must be its
// HubHello.
func (c *Client) awaitHubHello(ctx context.Context, msgs <-chan hubMessage, recvErr <-chan error) (hubMessage, error) {
	t := time.NewTimer(c.cfg.HubHelloTimeout)
	defer t.Stop()
	select {
	case m := <-msgs:
		if m.kind != kindHubHello {
			return hubMessage{}, invalid("the hub's first message must be hub_hello")
		}
		return m, nil
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "hub closed the stream before its hello")
		}
		return hubMessage{}, err
	case <-t.C:
		return hubMessage{}, status.Errorf(codes.DeadlineExceeded, "no hello from the hub within %s", c.cfg.HubHelloTimeout)
	case <-ctx.Done():
		return hubMessage{}, ctx.Err()
	}
}

// admit decides whether this agent serves the hub that sent hh: the
// cluster must be the one this agent is for, and the Identity keeper must
// accept the fleet id and cluster name.
func (c *Client) admit(ctx context.Context, hh hubMessage) error {
	if hh.cluster != c.cfg.Cluster {
		return &FleetMismatchError{
			FleetID: hh.fleetID, Cluster: hh.cluster, RecordedCluster: c.cfg.Cluster,
			Reason: fmt.Sprintf("the hub takes this agent for cluster %q, but it is the agent of cluster %q", hh.cluster, c.cfg.Cluster),
		}
	}
	if c.cfg.Identity == nil {
		return nil
	}
	if err := c.cfg.Identity.Admit(ctx, hh.fleetID, hh.cluster); err != nil {
		var mismatch *FleetMismatchError
		if errors.As(err, &mismatch) {
			return err
		}
		return fmt.Errorf("checking the hub's fleet identity: %w", err)
	}
	return nil
}

// refuse tells the hub this agent does not serve it, closes its side and
// waits (briefly) for the hub to end the stream, so the refusal arrives
// before the connection closes.
func (c *Client) refuse(stream syncv1.Sync_ConnectClient, e *FleetMismatchError, recvErr <-chan error) {
	c.refusal.Store(&e.Reason)
	msg := &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Refusal{Refusal: &syncv1.Refusal{
		Reason:              truncate(e.Reason, wire.MaxReasonLength),
		RecordedFleetId:     e.RecordedFleetID,
		RecordedClusterName: e.RecordedCluster,
	}}}
	if err := stream.Send(msg); err != nil {
		return
	}
	_ = stream.CloseSend()
	t := time.NewTimer(refusalLinger)
	defer t.Stop()
	select {
	case <-recvErr:
	case <-t.C:
	}
}

// refusalLinger bounds how long a refusing agent waits for the hub to end
// the stream.
const refusalLinger = 5 * time.Second

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
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

// sendLoop is the only goroutine that sends on the stream once the hub's
// hello is accepted: the hello, then prune reports and status reports as
// they come and a heartbeat on every tick.
func (c *Client) sendLoop(ctx context.Context, stream syncv1.Sync_ConnectClient, hello *syncv1.AgentMessage, reports *mailbox, gone *goneQueue) error {
	if err := stream.Send(hello); err != nil {
		return err
	}
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	namespace := v1alpha1.ClusterNamespace(c.cfg.Cluster)
	for {
		if msg := reports.take(); msg != nil {
			if err := stream.Send(msg); err != nil {
				// The hub hears of the prune again from the next
				// stream's snapshot.
				return err
			}
		}
		for _, name := range gone.takeAll() {
			msg := &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_WorkGone{WorkGone: &syncv1.WorkGone{Name: name}}}
			if err := stream.Send(msg); err != nil {
				// The next stream's hello no longer lists the Work.
				return err
			}
		}
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
		case <-reports.ready:
		case <-gone.ready:
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
	// epoch is the HubHello epoch, naming this stream's snapshot.
	epoch uint64
	// blocked says the deletion brake holds the snapshot's prune.
	blocked bool
	// resumed says the agent held applied Works when it said hello (a
	// generation, not only a record), so the hub sent only what changed
	// (State.Resumes), not every Work.
	resumed bool
	// counted says the snapshot was counted (countSnapshot).
	counted bool
	// reports carries prune reports to the send loop.
	reports *mailbox
	// gone carries the Works the agent is done with to the send loop.
	gone *goneQueue
}

// mailbox holds a stream's latest prune report until the send loop sends
// it. It has one slot: a newer report (the prune done after a
// confirmation, say) replaces an unsent older one about the same snapshot,
// which it supersedes.
type mailbox struct {
	mu    sync.Mutex
	msg   *syncv1.AgentMessage
	ready chan struct{}
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

func (m *mailbox) put(msg *syncv1.AgentMessage) {
	m.mu.Lock()
	m.msg = msg
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

func (m *mailbox) take() *syncv1.AgentMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := m.msg
	m.msg = nil
	return msg
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
		c.remove(ctx, st, m.delete)
	case kindOrphan:
		st.r.forget(m.orphan)
		delete(st.want, m.orphan)
		c.orphan(ctx, st, m.orphan)
	case kindSnapshotComplete:
		st.want = make(want, len(m.keep))
		for _, n := range m.keep {
			st.want[n] = true
		}
		c.complete(ctx, st, m.keep)
	case kindPruneConfirm:
		c.confirmed(ctx, st, m.epoch)
	case kindHubHello:
		// decodeHubMessage lets it through; only the first message may be
		// one, and awaitHubHello took that.
		c.log.Error(nil, "the hub sent a second hello on one stream; ignoring it")
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

func (c *Client) remove(ctx context.Context, st *streamState, name string) {
	c.status.forget(name)
	if err := c.cfg.Applier.Delete(ctx, name); err != nil {
		if ctx.Err() == nil {
			c.log.Error(err, "deleting Work; will retry", "work", name)
			st.r.add(name, retry{delete: true})
		}
		return
	}
	st.gone.add(name)
}

// orphan forgets Work name and keeps its objects running: it vanished
// from the hub without a deletion intent.
func (c *Client) orphan(ctx context.Context, st *streamState, name string) {
	c.status.forget(name)
	c.log.Info("the hub lost Work without meaning to delete it; orphaning its objects, which keep running", "work", name)
	if err := c.cfg.Applier.Orphan(ctx, name); err != nil {
		if ctx.Err() == nil {
			c.log.Error(err, "orphaning Work; will retry", "work", name)
			st.r.add(name, retry{orphan: true})
		}
		return
	}
	st.gone.add(name)
}

func (c *Client) complete(ctx context.Context, st *streamState, keep []string) {
	// A failed apply of a Work the hub no longer wants must not be
	// retried; the prune below removes it.
	st.r.keepOnly(keep)
	st.r.forget(pruneKey)
	c.prune(ctx, st, keep, false, nil)
}

// confirmed acts on the hub's PruneConfirm: an admin confirmed the prune
// the brake held for the snapshot of epoch. It prunes to what the hub
// wants now. A confirmation for another stream's snapshot, or with no
// prune held or failing, changes nothing.
func (c *Client) confirmed(ctx context.Context, st *streamState, epoch uint64) {
	_, retrying := st.r.items[pruneKey]
	if epoch != st.epoch || st.want == nil || !(st.blocked || retrying) {
		c.log.Info("ignoring a prune confirmation that matches no held prune", "epoch", epoch, "streamEpoch", st.epoch, "blocked", st.blocked)
		return
	}
	c.log.Info("the hub confirmed the prune the deletion brake held; pruning", "epoch", epoch)
	st.r.forget(pruneKey)
	c.prune(ctx, st, st.want.names(), true, nil)
}

// prune calls SnapshotComplete with keep. A prune the deletion brake holds
// is reported to the hub and waits for a PruneConfirm; any other failure is
// retried (rt is the retry being made, nil on the first attempt).
//
// A retry does not replay keep: it asks again with what the hub wants at
// the time of the retry (st.want), because Works may have been upserted
// (and applied) since the attempt that failed, and pruning with the old
// list would delete them while the hub shows them running. Ending the
// stream on a failed prune would be correct too, but one object the member
// refuses to delete would then cost a reconnect and a fresh snapshot on
// every attempt, with status re-sent each time; recomputing keeps the
// stream and stays exact, since st.want follows every message the hub
// sent on it.
func (c *Client) prune(ctx context.Context, st *streamState, keep []string, confirmed bool, rt *retry) {
	c.status.keepOnly(keep)
	err := c.cfg.Applier.SnapshotComplete(ctx, keep, confirmed)
	var blocked *PruneBlockedError
	switch {
	case err == nil:
		st.blocked = false
		c.pruneBlocked.Store(false)
		c.snapshotDone.Store(true)
		c.countSnapshot(st)
		st.reports.put(&syncv1.AgentMessage{Kind: &syncv1.AgentMessage_SnapshotPruned{SnapshotPruned: &syncv1.SnapshotPruned{
			Epoch: st.epoch, Confirmed: confirmed,
		}}})
		c.log.V(1).Info("snapshot complete", "works", len(keep), "confirmed", confirmed)
	case errors.As(err, &blocked):
		// Everything the hub sent is applied; only the prune waits.
		st.blocked = true
		c.pruneBlocked.Store(true)
		c.snapshotDone.Store(true)
		c.countSnapshot(st)
		works := blocked.Works
		if len(works) > wire.MaxBlockedWorks {
			works = works[:wire.MaxBlockedWorks]
		}
		st.reports.put(&syncv1.AgentMessage{Kind: &syncv1.AgentMessage_PruneBlocked{PruneBlocked: &syncv1.PruneBlocked{
			Epoch: st.epoch, WouldDelete: int64(blocked.WouldDelete), Held: int64(blocked.Held), Works: works,
		}}})
		c.log.Info("the deletion brake holds the prune after the snapshot; waiting for an admin's confirmation on the hub",
			"epoch", st.epoch, "wouldDelete", blocked.WouldDelete, "held", blocked.Held, "confirmWith", fmt.Sprintf("%s=%d", v1alpha1.AnnotationConfirmPrune, st.epoch))
	case ctx.Err() != nil:
	default:
		c.log.Error(err, "pruning after the snapshot; will retry", "keep", len(keep))
		if rt == nil {
			st.r.add(pruneKey, retry{prune: true, confirmed: confirmed})
		} else {
			st.r.again(pruneKey, *rt)
		}
	}
}

// countSnapshot counts the stream's snapshot, once per stream, as a full
// snapshot or a resume.
func (c *Client) countSnapshot(st *streamState) {
	if st.counted {
		return
	}
	st.counted = true
	if st.resumed {
		c.resumes.Add(1)
	} else {
		c.snapshots.Add(1)
	}
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
			c.prune(ctx, st, st.want.names(), rt.confirmed, &rt)
		case rt.delete:
			if err := c.cfg.Applier.Delete(ctx, name); err != nil {
				if ctx.Err() == nil {
					r.again(name, rt)
				}
			} else {
				st.gone.add(name)
			}
		case rt.orphan:
			if err := c.cfg.Applier.Orphan(ctx, name); err != nil {
				if ctx.Err() == nil {
					r.again(name, rt)
				}
			} else {
				st.gone.add(name)
			}
		default:
			if err := c.cfg.Applier.Apply(ctx, rt.work); err != nil && ctx.Err() == nil {
				r.again(name, rt)
			}
		}
	}
}
