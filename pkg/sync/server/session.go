package server

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// session is one agent's stream.
type session struct {
	srv     *Server
	cluster string
	// ident is what the agent's certificate proved (see auth.go).
	ident  Identity
	id     uint64
	info   AgentInfo
	log    logr.Logger
	stream syncv1.Sync_ConnectServer

	// ctx ends with the stream; its cause is the status the stream ends
	// with when the server ends it (replaced, queue overflow, shutdown).
	ctx    context.Context
	cancel context.CancelCauseFunc

	queue        *queue
	snapshotSent atomic.Bool

	// epoch is this stream's HubHello epoch, naming its snapshot.
	epoch uint64
	// confirm holds a PruneConfirm for epoch until the send loop sends it
	// (one slot: a second confirmation while one waits is the same).
	confirm chan struct{}

	// held is what the agent holds, as far as this stream knows: first
	// what its hello said, then updated with every upsert and delete sent.
	// Only the send loop touches it.
	held map[string]heldWork

	// pacer paces this stream's WorkDeletes (nil: no limit); only the
	// send loop touches it. deletesWaiting mirrors its backlog for Stats.
	pacer          *deletePacer
	deletesWaiting atomic.Int64

	// status paces this stream's status reports (nil: no limit); only
	// the handler goroutine touches it.
	status *statusPacer

	// pruned are the held Works the snapshot left out, which the agent's
	// prune removes: when it reports SnapshotPruned, they are gone (less
	// those sent again since, which the agent keeps). awaiting are the
	// Works sent WorkDelete or WorkOrphan whose WorkGone has not come: no
	// longer held, yet not done. Both are guarded by prunedMu: the send
	// loop writes them, the handler reads them.
	prunedMu sync.Mutex
	pruned   []string
	awaiting map[string]bool
}

// await records that the agent was told to remove Work name and has not
// said it is done.
func (sess *session) await(name string, on bool) {
	sess.prunedMu.Lock()
	defer sess.prunedMu.Unlock()
	if on {
		if sess.awaiting == nil {
			sess.awaiting = map[string]bool{}
		}
		sess.awaiting[name] = true
		return
	}
	delete(sess.awaiting, name)
}

// awaited says the agent was told to remove Work name and has not said it
// is done.
func (sess *session) awaited(name string) bool {
	sess.prunedMu.Lock()
	defer sess.prunedMu.Unlock()
	return sess.awaiting[name]
}

// sentAgain takes Work name off the prune's list: it was sent again, so
// the agent keeps it.
func (sess *session) sentAgain(name string) {
	sess.prunedMu.Lock()
	defer sess.prunedMu.Unlock()
	sess.pruned = slices.DeleteFunc(sess.pruned, func(n string) bool { return n == name })
	delete(sess.awaiting, name)
}

// takePruned returns the Works the snapshot's prune removed, once.
func (sess *session) takePruned() []string {
	sess.prunedMu.Lock()
	defer sess.prunedMu.Unlock()
	out := sess.pruned
	sess.pruned = nil
	return out
}

// confirmGone tells the DeletionSink that this agent holds nothing of
// Work name.
func (sess *session) confirmGone(name string) {
	if d := sess.srv.cfg.Deletions; d != nil {
		d.WorkGone(sess.ctx, sess.cluster, name)
	}
}

// confirmNotHeld confirms, after the hello, every Work of the cluster
// being deleted that the agent does not hold: it deleted it while the hub
// did not hear (a lost WorkGone, a hub restart) or never had it.
func (sess *session) confirmNotHeld() error {
	tl, ok := sess.srv.cfg.Works.(TerminatingLister)
	if !ok || sess.srv.cfg.Deletions == nil {
		return nil
	}
	names, err := tl.TerminatingWorks(sess.cluster)
	if err != nil {
		return status.Errorf(codes.Unavailable, "listing the Works of cluster %q being deleted: %v", sess.cluster, err)
	}
	for _, name := range names {
		if _, held := sess.held[name]; !held {
			sess.confirmGone(name)
		}
	}
	return nil
}

var errShuttingDown = status.Error(codes.Unavailable, "hub is shutting down; reconnect later")

// Connect serves one agent's stream. See the package documentation of
// pkg/sync for the protocol.
func (s *Server) Connect(stream syncv1.Sync_ConnectServer) (err error) {
	defer func() { s.metrics.streamsClosed.WithLabelValues(status.Code(err).String()).Inc() }()

	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	stopWatch := context.AfterFunc(s.stopCtx, func() { cancel(errShuttingDown) })
	defer stopWatch()
	if s.stopCtx.Err() != nil {
		return errShuttingDown
	}

	// The interceptor (streamAuth) proved the certificate, and ends ctx
	// when it expires.
	ident, ok := IdentityFromContext(ctx)
	if !ok {
		return status.Error(codes.Internal, "the stream reached the handler without an authenticated identity; this is a bug in the hub")
	}
	cluster := ident.Cluster
	log := s.log.WithValues("cluster", cluster)
	if ok, wait := s.connects.allow(cluster, time.Now()); !ok {
		s.metrics.perCluster.incLimited(cluster)
		return status.Errorf(codes.ResourceExhausted,
			"cluster %q opens streams faster than the hub allows (the hub's --member-connect-rate); retry in %s", cluster, wait.Round(time.Millisecond))
	}
	known, err := s.cfg.Clusters.ClusterKnown(ctx, cluster)
	if err != nil {
		return status.Errorf(codes.Unavailable, "could not check whether cluster %q is registered: %v", cluster, err)
	}
	if !known {
		log.Info("refused sync stream: no such MemberCluster")
		return status.Errorf(codes.PermissionDenied,
			"cluster %q is not registered with this hub: create MemberCluster %q on the hub, or use the certificate of a registered cluster", cluster, cluster)
	}

	fleetID := s.FleetID()
	if fleetID == "" {
		return status.Error(codes.Unavailable, "the hub has no fleet identity yet; reconnect later")
	}
	epoch := s.epochs.Add(1)
	// The hub speaks first, so that an agent that serves another fleet or
	// cluster can refuse before it says or applies anything.
	hubHello := &syncv1.HubMessage{Kind: &syncv1.HubMessage_HubHello{HubHello: &syncv1.HubHello{
		FleetId: fleetID, ClusterName: cluster, Epoch: epoch,
	}}}
	if err := stream.Send(hubHello); err != nil {
		return streamError(ctx, err)
	}
	s.metrics.sent.WithLabelValues(msgHubHello).Inc()

	// One goroutine reads, so that the handler can wait for the hello,
	// for the send loop and for cancellation at the same time. It ends
	// when the stream does: Recv fails once the handler has returned.
	in := make(chan *syncv1.AgentMessage)
	recvErr := make(chan error, 1)
	go func() {
		for {
			var raw wire.Raw
			if err := stream.RecvMsg(&raw); err != nil {
				recvErr <- err
				return
			}
			m, err := decodeAgentMessage(raw)
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case in <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	first, err := s.awaitHello(ctx, in, recvErr)
	if err != nil {
		return err
	}
	if r := first.GetRefusal(); r != nil {
		return s.refused(ctx, cluster, log, r)
	}
	h, err := decodeHello(first.GetHello())
	if err != nil {
		return err
	}

	p, _ := peer.FromContext(ctx)
	sess := &session{
		srv:     s,
		cluster: cluster,
		ident:   ident,
		stream:  stream,
		ctx:     ctx,
		cancel:  cancel,
		held:    h.held,
		epoch:   epoch,
		confirm: make(chan struct{}, 1),
		pacer:   newDeletePacer(s.cfg.DeleteRate, s.cfg.DeleteBurst),
		status:  newStatusPacer(s.cfg.StatusRate, s.cfg.StatusBurst, s.cfg.StatusBacklogBytes),
		info: AgentInfo{
			Identity:          ident.URI,
			Version:           h.version,
			Instance:          h.instance,
			KubernetesVersion: h.kubernetesVersion,
			Resources:         h.resources,
			ConnectedAt:       time.Now(),
		},
	}
	if p != nil && p.Addr != nil {
		sess.info.Peer = p.Addr.String()
	}
	depthGauge := s.metrics.queueDepth.WithLabelValues(cluster)
	sess.queue = newQueue(s.cfg.MaxQueueDepth, func(n int) {
		// A replaced stream's queue must not overwrite its successor's
		// gauge while it winds down.
		if ctx.Err() == nil {
			depthGauge.Set(float64(n))
		}
	})
	s.mu.Lock()
	s.nextID++
	sess.id = s.nextID
	s.mu.Unlock()
	sess.log = log.WithValues("stream", sess.id)

	s.register(sess)
	defer func() { s.unregister(sess, err) }()
	// The MemberCluster may have been deleted, or this certificate
	// revoked, between the checks above and register, when
	// ClusterChanged found no stream to end: look again now that it
	// would find this one.
	sess.recheck()
	sess.log.Info("agent connected", "peer", sess.info.Peer, "version", h.version, "instance", h.instance, "held", len(h.held), "epoch", epoch)

	// The send loop runs on its own goroutine so that a Send blocked by a
	// stalled agent (HTTP/2 flow control) cannot keep this handler from
	// ending the stream: returning from the handler finishes the stream,
	// which unblocks that Send.
	sendErr := make(chan error, 1)
	go func() {
		defer sess.pacer.stop()
		sendErr <- sess.sendLoop()
	}()

	defer func() { sess.log.Info("agent stream ended", "code", status.Code(err).String(), "reason", err) }()
	defer sess.status.stop()
	for {
		select {
		case m := <-in:
			if err := sess.handle(m); err != nil {
				return err
			}
		case <-sess.status.ready():
			sess.status.fired()
			if err := sess.handleWaitingStatus(); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				// The agent closed its side: a clean goodbye.
				return nil
			}
			if status.Code(err) == codes.ResourceExhausted {
				return s.recvLimitHint(err)
			}
			return streamError(ctx, err)
		case err := <-sendErr:
			return streamError(ctx, err)
		case <-ctx.Done():
			if err := s.refusedAboveLimit(ctx, recvErr); err != nil {
				return err
			}
			return streamError(ctx, ctx.Err())
		}
	}
}

// recvLimitHint adds to gRPC's refusal of a message above the receive
// limit which limit it is and how to raise it: an honest agent of a very
// large member (its hello lists every Work it holds) hits it too. gRPC has
// answered the agent already with its own message; this one is for the
// hub's log and the MemberCluster's Connected condition.
func (s *Server) recvLimitHint(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return err
	}
	return status.Errorf(codes.ResourceExhausted,
		"%s; messages from agents are limited to %d bytes (the hub's --sync-max-recv-message-bytes)", st.Message(), s.cfg.MaxRecvMessageBytes)
}

// refusedAboveLimit finds out, when the stream's context ended without a
// cause from the server, whether gRPC ended it for a message above the
// receive limit: gRPC answers the agent itself and cancels the stream, so
// the handler may see the cancellation before the receive loop's error.
// It waits for that error a moment (the receive loop returns as soon as
// the stream ends) and returns it with recvLimitHint; nil for any other
// end.
func (s *Server) refusedAboveLimit(ctx context.Context, recvErr <-chan error) error {
	if _, ok := status.FromError(context.Cause(ctx)); ok {
		return nil
	}
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case err := <-recvErr:
		if status.Code(err) == codes.ResourceExhausted {
			return s.recvLimitHint(err)
		}
	case <-t.C:
	}
	return nil
}

// streamError picks the status the stream ends with: the cause the server
// gave when it ended the stream itself, else the error at hand.
func streamError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		if _, ok := status.FromError(cause); ok {
			return cause
		}
		return status.FromContextError(cause).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// refused records an agent's refusal of this hub and ends its stream. The
// agent was never registered, so a connected agent of the same cluster
// keeps its stream.
func (s *Server) refused(ctx context.Context, cluster string, log logr.Logger, m *syncv1.Refusal) error {
	r, err := decodeRefusal(m)
	if err != nil {
		return err
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.Peer = p.Addr.String()
	}
	log.Info("agent refused this hub", "reason", r.Reason, "recordedFleetID", r.RecordedFleetID, "recordedCluster", r.RecordedCluster, "peer", r.Peer)
	if s.cfg.Agents != nil {
		s.cfg.Agents.AgentRefused(cluster, r)
	}
	return status.Errorf(codes.FailedPrecondition,
		"the agent of cluster %q refused this hub (fleet %s): %s", cluster, s.FleetID(), r.Reason)
}

// awaitHello waits for the agent's first message, which must be a hello
// or a refusal.
func (s *Server) awaitHello(ctx context.Context, in <-chan *syncv1.AgentMessage, recvErr <-chan error) (*syncv1.AgentMessage, error) {
	timer := time.NewTimer(s.cfg.HelloTimeout)
	defer timer.Stop()
	select {
	case m := <-in:
		s.metrics.received.WithLabelValues(messageType(m)).Inc()
		if m.GetHello() == nil && m.GetRefusal() == nil {
			return nil, invalid("the first message on a stream must be hello (or refusal), got %s", messageType(m))
		}
		return m, nil
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			return nil, invalid("stream closed before hello")
		}
		if status.Code(err) == codes.ResourceExhausted {
			return nil, s.recvLimitHint(err)
		}
		return nil, streamError(ctx, err)
	case <-timer.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no hello within %s", s.cfg.HelloTimeout)
	case <-ctx.Done():
		if err := s.refusedAboveLimit(ctx, recvErr); err != nil {
			return nil, err
		}
		return nil, streamError(ctx, ctx.Err())
	}
}

func messageType(m *syncv1.AgentMessage) string {
	switch m.GetKind().(type) {
	case *syncv1.AgentMessage_Hello:
		return msgHello
	case *syncv1.AgentMessage_Status:
		return msgStatus
	case *syncv1.AgentMessage_Heartbeat:
		return msgHeartbeat
	case *syncv1.AgentMessage_Refusal:
		return msgRefusal
	case *syncv1.AgentMessage_PruneBlocked:
		return msgPruneBlocked
	case *syncv1.AgentMessage_SnapshotPruned:
		return msgSnapshotPruned
	case *syncv1.AgentMessage_WorkGone:
		return msgWorkGone
	default:
		return "unknown"
	}
}

// handle acts on one message after the hello. Sinks are called here, on
// the handler goroutine, so a slow sink holds up this agent only.
func (sess *session) handle(m *syncv1.AgentMessage) error {
	s := sess.srv
	s.metrics.received.WithLabelValues(messageType(m)).Inc()
	switch k := m.GetKind().(type) {
	case *syncv1.AgentMessage_Status:
		if err := checkStatusTarget(k.Status, sess.cluster); err != nil {
			return err
		}
		now, kept := sess.status.admit(k.Status.GetName(), k.Status, time.Now())
		if !kept {
			s.metrics.perCluster.addClamped(sess.cluster, clampRateBacklogFull, 1)
		}
		if now {
			return sess.handleStatus(k.Status)
		}
	case *syncv1.AgentMessage_Heartbeat:
		rs, err := decodeHeartbeat(k.Heartbeat)
		if err != nil {
			return err
		}
		if s.cfg.Agents != nil {
			s.cfg.Agents.AgentHeartbeat(sess.cluster, Heartbeat{Time: time.Now(), Resources: rs})
		}
	case *syncv1.AgentMessage_PruneBlocked:
		b, err := decodePruneBlocked(k.PruneBlocked, sess.epoch)
		if err != nil {
			return err
		}
		sess.log.Info("agent's deletion brake holds the prune", "epoch", b.Epoch, "wouldDelete", b.WouldDelete, "held", b.Held)
		if s.cfg.Agents != nil {
			s.cfg.Agents.AgentPruneBlocked(sess.cluster, b)
		}
	case *syncv1.AgentMessage_SnapshotPruned:
		if e := k.SnapshotPruned.GetEpoch(); e != sess.epoch {
			return invalid("snapshot_pruned: epoch %d is not this stream's (%d)", e, sess.epoch)
		}
		if s.cfg.Agents != nil {
			s.cfg.Agents.AgentPruned(sess.cluster, sess.epoch, k.SnapshotPruned.GetConfirmed())
		}
		// The Works the snapshot left out are gone from the member now.
		for _, name := range sess.takePruned() {
			sess.confirmGone(name)
		}
	case *syncv1.AgentMessage_WorkGone:
		name := k.WorkGone.GetName()
		if err := wire.ValidateWorkName(name); err != nil {
			return invalid("work_gone: %v", err)
		}
		sess.await(name, false)
		sess.confirmGone(name)
	case *syncv1.AgentMessage_Hello:
		return invalid("hello may be sent only once per stream")
	case *syncv1.AgentMessage_Refusal:
		return invalid("refusal may only be the first message on a stream")
	default:
		return invalid("empty or unknown agent message")
	}
	return nil
}

// maxStatusPerTick bounds the waiting reports handled in one go, so that
// the messages behind them (heartbeats above all) wait at most that many
// reports.
const maxStatusPerTick = 64

// handleWaitingStatus handles the status reports that wait for the status
// rate, oldest Work first, while there are tokens.
func (sess *session) handleWaitingStatus() error {
	for range maxStatusPerTick {
		m, ok := sess.status.next(time.Now())
		if !ok {
			return nil
		}
		if err := sess.handleStatus(m); err != nil {
			return err
		}
	}
	if sess.status.backlogLen() > 0 {
		sess.status.arm(time.Now())
	}
	return nil
}

// handleStatus decodes a status report whose target was checked, clamps it
// to what the agent may write (clampStatus) and hands it to the sink. A
// report that does not decode ends the stream; one whose parts are out of
// bounds is clamped and counted.
func (sess *session) handleStatus(m *syncv1.StatusReport) error {
	s := sess.srv
	name, st, err := decodeStatus(m, sess.cluster)
	if err != nil {
		return err
	}
	work, err := s.cfg.Works.GetWork(sess.cluster, name)
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading Work %q of cluster %q: %v", name, sess.cluster, err)
	}
	out, cut := clampStatus(work, st)
	for what, n := range cut {
		s.metrics.perCluster.addClamped(sess.cluster, what, n)
	}
	if len(cut) > 0 && !(len(cut) == 1 && cut[clampWorkUnknown] > 0) {
		sess.log.V(1).Info("clamped the agent's status report", "work", name, "cut", cut)
	}
	if out != nil && s.cfg.Status != nil {
		s.cfg.Status.WorkStatus(sess.ctx, sess.cluster, name, out)
	}
	return nil
}

// enqueue marks Work name as changed. When the queue is full the stream
// ends: see queue.
func (sess *session) enqueue(name string) {
	if !sess.queue.add(name, time.Now()) {
		now, _ := sess.queue.depth()
		sess.cancel(status.Errorf(codes.ResourceExhausted,
			"agent of cluster %q fell %d Work changes behind (the limit); reconnect to resync", sess.cluster, now))
	}
}

// sendLoop sends the snapshot and then every queued change, until the
// stream ends.
func (sess *session) sendLoop() error {
	if err := sess.waitSynced(); err != nil {
		return err
	}
	if err := sess.sendSnapshot(); err != nil {
		return err
	}
	for {
		select {
		case <-sess.ctx.Done():
			return sess.ctx.Err()
		case <-sess.confirm:
			msg := &syncv1.HubMessage{Kind: &syncv1.HubMessage_PruneConfirm{PruneConfirm: &syncv1.PruneConfirm{Epoch: sess.epoch}}}
			if err := sess.send(msg, msgPruneConfirm); err != nil {
				return err
			}
			sess.log.Info("sent a prune confirmation", "epoch", sess.epoch)
			continue
		case <-sess.pacer.ready():
			sess.pacer.fired()
			if err := sess.sendWaitingDeletes(); err != nil {
				return err
			}
			continue
		case <-sess.queue.ready:
		}
		for {
			name, queued, ok := sess.queue.pop()
			if !ok {
				break
			}
			sess.srv.metrics.queueWait.Observe(time.Since(queued).Seconds())
			if err := sess.sync(name, false); err != nil {
				return err
			}
		}
	}
}

// waitSynced waits for the source to have seen every Work: a snapshot from
// a cold cache would be empty and make the agent prune everything.
func (sess *session) waitSynced() error {
	if sess.srv.cfg.Works.HasSynced() {
		return nil
	}
	sess.log.Info("waiting for the Work source to sync before sending the snapshot")
	t := time.NewTicker(sess.srv.cfg.SyncPollInterval)
	defer t.Stop()
	for !sess.srv.cfg.Works.HasSynced() {
		select {
		case <-sess.ctx.Done():
			return sess.ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// sendSnapshot turns what the agent holds into what the source wants,
// sending only the Works that are new or changed, and ends with
// SnapshotComplete, which tells the agent what to prune. Changes that
// arrive meanwhile are queued (the queue existed before the list was taken)
// and sent after it; those already covered by the snapshot are skipped then
// because held already matches.
func (sess *session) sendSnapshot() error {
	// Before anything changes held: what the hello said.
	if err := sess.confirmNotHeld(); err != nil {
		return err
	}
	works, err := sess.srv.cfg.Works.ListWorks(sess.cluster)
	if err != nil {
		return status.Errorf(codes.Unavailable, "listing the Works of cluster %q: %v", sess.cluster, err)
	}
	want := make(map[string]bool, len(works))
	names := make([]string, 0, len(works))
	slices.SortFunc(works, func(a, b *v1alpha1.Work) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	upserts := 0
	for _, w := range works {
		if !sess.ours(w) || want[w.Name] {
			continue
		}
		want[w.Name] = true
		names = append(names, w.Name)
		sent, err := sess.upsert(w)
		if err != nil {
			return err
		}
		if sent {
			upserts++
		}
	}
	// Held Works the hub no longer has are not deleted one by one here:
	// SnapshotComplete's list leaves them out, and the agent prunes them,
	// through its deletion brake. A snapshot that drops most of what the
	// agent runs (a hub restored from an old backup, the Work CRD deleted
	// and created again) is then held until an admin confirms it, instead
	// of arriving as a burst of single deletes, which pass the brake.
	//
	// A held Work the source saw vanish without the deletion intent (while
	// this agent was away) is orphaned first, so the prune cannot reach
	// it. One whose vanishing the source did not see (the hub restarted
	// since) is left to the prune and its brake: see pkg/sync's doc.
	gone, orphaned := 0, 0
	var pruned []string
	for _, name := range slices.Sorted(maps.Keys(sess.held)) {
		if want[name] {
			continue
		}
		if reason, known := sess.srv.cfg.Works.DeletionIntent(sess.cluster, name); known && reason == "" {
			if err := sess.orphan(name); err != nil {
				return err
			}
			orphaned++
			continue
		}
		delete(sess.held, name)
		pruned = append(pruned, name)
		gone++
	}
	sess.prunedMu.Lock()
	sess.pruned = pruned
	sess.prunedMu.Unlock()
	msg := &syncv1.HubMessage{Kind: &syncv1.HubMessage_SnapshotComplete{SnapshotComplete: &syncv1.SnapshotComplete{Names: names}}}
	if err := sess.send(msg, msgSnapshotComplete); err != nil {
		return err
	}
	sess.snapshotSent.Store(true)
	sess.log.Info("snapshot sent", "works", len(names), "upserts", upserts, "orphaned", orphaned, "toPrune", gone)
	return nil
}

// ours guards against a source that hands out another cluster's Work: an
// agent must never receive one.
func (sess *session) ours(w *v1alpha1.Work) bool {
	if w.Namespace != v1alpha1.ClusterNamespace(sess.cluster) {
		sess.log.Error(nil, "Work source returned a Work of another namespace; not sending it", "work", w.Namespace+"/"+w.Name)
		return false
	}
	return true
}

// sync sends whatever brings the agent's copy of Work name up to date,
// reading the Work's latest state from the source. A delete waits for the
// pacer unless paced says its token is already taken. Whatever else is
// sent for a Work whose delete waits (an upsert of the Work re-created,
// an orphan) takes it off the waiting list: the delete is off.
func (sess *session) sync(name string, paced bool) error {
	w, err := sess.srv.cfg.Works.GetWork(sess.cluster, name)
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading Work %q of cluster %q: %v", name, sess.cluster, err)
	}
	if w == nil {
		if _, held := sess.held[name]; !held {
			sess.stopWaiting(name)
			// The agent never had it, or is done with it: a deletion
			// waiting for its member may complete. Not while the agent
			// works on a WorkDelete or WorkOrphan sent for it: its
			// WorkGone says when it is done.
			if !sess.awaited(name) {
				sess.confirmGone(name)
			}
			return nil
		}
		// Only a deletion the hub meant deletes the member objects; a
		// Work that vanished without the mark (or whose vanishing the
		// source cannot account for) is orphaned.
		if reason, known := sess.srv.cfg.Works.DeletionIntent(sess.cluster, name); known && reason != "" {
			if paced {
				return sess.delete(name)
			}
			return sess.deleteOrWait(name)
		}
		sess.stopWaiting(name)
		return sess.orphan(name)
	}
	sess.stopWaiting(name)
	if !sess.ours(w) {
		return nil
	}
	_, err = sess.upsert(w)
	return err
}

// deleteOrWait sends WorkDelete for name when the pacer has a token and no
// older delete waits; otherwise name waits its turn (in place, when it
// already waits) and the send loop goes on with other Works.
func (sess *session) deleteOrWait(name string) error {
	p := sess.pacer
	if p == nil {
		return sess.delete(name)
	}
	if p.has(name) {
		return nil
	}
	now := time.Now()
	if p.len() == 0 && p.allow(now) {
		return sess.delete(name)
	}
	p.push(name)
	sess.setDeletesWaiting(p.len())
	if !p.logged {
		p.logged = true
		sess.log.Info("pacing Work deletions to this member: more arrived at once than the burst allows; the rest follow at the delete rate (see flotilla_sync_deletions_pending)",
			"ratePerSecond", float64(p.limiter.Limit()), "burst", p.limiter.Burst(), "firstWaiting", name)
	}
	p.arm(now)
	return nil
}

// sendWaitingDeletes sends the waiting deletes, oldest first, while the
// pacer has tokens, and arms its timer for the rest. Each is read from
// the source again when its turn comes, so a Work re-created meanwhile is
// upserted, not deleted (the token it took is not given back: pacing errs
// only on the slow side).
func (sess *session) sendWaitingDeletes() error {
	p := sess.pacer
	for {
		name, ok := p.front()
		if !ok {
			return nil
		}
		now := time.Now()
		if !p.allow(now) {
			p.arm(now)
			return nil
		}
		p.remove(name)
		sess.setDeletesWaiting(p.len())
		if err := sess.sync(name, true); err != nil {
			return err
		}
	}
}

// stopWaiting takes name off the pacer's waiting list, if it is there.
func (sess *session) stopWaiting(name string) {
	if sess.pacer != nil && sess.pacer.remove(name) {
		sess.setDeletesWaiting(sess.pacer.len())
	}
}

// setDeletesWaiting records the pacer's backlog, in Stats and, while this
// stream is its cluster's current one, in flotilla_sync_deletions_pending
// (a replaced stream winding down must not overwrite its successor's).
func (sess *session) setDeletesWaiting(n int) {
	sess.deletesWaiting.Store(int64(n))
	s := sess.srv
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sessions[sess.cluster] == sess {
		s.metrics.deletionsPending.WithLabelValues(sess.cluster).Set(float64(n))
	}
}

// upsert sends w unless the agent already holds this uid and generation.
func (sess *session) upsert(w *v1alpha1.Work) (sent bool, err error) {
	have, held := sess.held[w.Name]
	if held && have.uid == string(w.UID) && have.generation == w.Generation {
		return false, nil
	}
	data, err := wire.EncodeWork(w)
	if err != nil {
		// Not the agent's fault and not retryable: skip this Work rather
		// than end the stream over and over.
		sess.log.Error(err, "cannot encode Work; not sending it", "work", w.Name)
		return false, nil
	}
	// Leave room for the protobuf framing around the JSON.
	if len(data) > sess.srv.cfg.MaxMessageBytes-1024 {
		sess.log.Error(nil, "Work is larger than the maximum message size; not sending it", "work", w.Name, "bytes", len(data))
		return false, nil
	}
	msg := &syncv1.HubMessage{Kind: &syncv1.HubMessage_Upsert{Upsert: &syncv1.WorkUpsert{Work: data}}}
	if err := sess.send(msg, msgUpsert); err != nil {
		return false, err
	}
	sess.held[w.Name] = heldWork{uid: string(w.UID), generation: w.Generation}
	sess.sentAgain(w.Name)
	return true, nil
}

func (sess *session) delete(name string) error {
	msg := &syncv1.HubMessage{Kind: &syncv1.HubMessage_Delete{Delete: &syncv1.WorkDelete{Name: name}}}
	if err := sess.send(msg, msgDelete); err != nil {
		return err
	}
	delete(sess.held, name)
	sess.await(name, true)
	return nil
}

// orphan tells the agent to keep Work name's objects running and forget
// the Work. The Work is no longer held, so it is sent once: a later change
// of the same name either finds nothing to do or is a new Work.
func (sess *session) orphan(name string) error {
	msg := &syncv1.HubMessage{Kind: &syncv1.HubMessage_Orphan{Orphan: &syncv1.WorkOrphan{Name: name}}}
	if err := sess.send(msg, msgOrphan); err != nil {
		return err
	}
	delete(sess.held, name)
	sess.await(name, true)
	sess.srv.metrics.perCluster.incOrphaned(sess.cluster)
	sess.log.Info("Work vanished from the hub without a deletion intent; told the agent to orphan its objects, which keep running", "work", name)
	return nil
}

func (sess *session) send(msg *syncv1.HubMessage, typ string) error {
	start := time.Now()
	if err := sess.stream.Send(msg); err != nil {
		return err
	}
	sess.srv.metrics.sendLatency.Observe(time.Since(start).Seconds())
	sess.srv.metrics.sent.WithLabelValues(typ).Inc()
	return nil
}
