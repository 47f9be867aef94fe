package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsetup "github.com/flotilla-dev/flotilla/agent/setup"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// TestAgentReadiness runs a real hub and agent over mTLS against a real
// member control plane, the agent reaching its member apiserver through a
// TCP relay on loopback the test can cut, and polls the agent's /readyz and
// /healthz over HTTP:
//   - stream up, member reachable: ready, both named checks pass;
//   - hub stopped (stream down): still ready, and the agent logs that it
//     runs autonomously with the Work it holds; the hub back: the stream
//     comes back and the agent logs that autonomy ended;
//   - member apiserver unreachable: not ready, /readyz/member-apiserver
//     says so, /healthz still answers; reachable again: ready;
//   - the hub refuses the agent (its certificate revoked): not ready,
//     /readyz/hub-stream says the hub refused it and it stood down;
//     accepted again: ready.
func TestAgentReadiness(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	_, stopHub := f.startSyncHub(t, syncAddr)

	member := f.cfgs["member-1"]
	u, err := url.Parse(member.Host)
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, u.Host)
	viaRelay := rest.CopyConfig(member)
	viaRelay.Host = "https://" + relay.addr
	if viaRelay.TLSClientConfig.ServerName == "" {
		// The member's certificate names its own host, not the relay's.
		viaRelay.TLSClientConfig.ServerName = u.Hostname()
	}

	logs := &testutil.LogBuffer{}
	probeAddr := freeAddr(t)
	opts := f.agentOptions(t, "member-1", syncAddr)
	opts.Config = viaRelay
	opts.ProbeAddr = probeAddr
	opts.Logger = logs.Logger()
	a, err := agentsetup.New(opts)
	if err != nil {
		t.Fatalf("building the agent: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	runUntilStopped(t, "agent", cancel, func() error { return a.Start(runCtx) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's log:\n%s", logs)
		}
	})
	every := testutil.Every(200 * time.Millisecond)
	ready := testutil.ProbeIs(probeAddr, "/readyz?verbose", http.StatusOK,
		"[+]"+agentsetup.CheckMemberAPIServer+" ok", "[+]"+agentsetup.CheckHubStream+" ok")
	healthy := testutil.ProbeIs(probeAddr, "/healthz", http.StatusOK)
	connected := func() error {
		if !a.Sync.State().Connected {
			return errors.New("no stream to the hub")
		}
		return nil
	}

	// Stream up, member reachable.
	waitReady(t, f.hub, "member-1")
	f.createWeb(t)
	eventually(t, "the agent's stream to the hub", 30*time.Second, connected)
	testutil.Eventually(t, "the connected agent ready", 30*time.Second, ready, every)

	// Hub gone: ready, and autonomy reported.
	stopHub()
	eventually(t, "the agent's stream ending with the hub", 30*time.Second, func() error {
		if a.Sync.State().Connected {
			return errors.New("the stream is still open")
		}
		return nil
	})
	testutil.Eventually(t, "the agent logging that it runs autonomously", 60*time.Second, func() error {
		// Ready on every look while the hub is away.
		if err := ready(); err != nil {
			t.Errorf("the agent became unready with the hub away: %v", err)
		}
		if !strings.Contains(logs.String(), "running autonomously") {
			return errors.New(`no "running autonomously" in the agent's log yet`)
		}
		return nil
	}, testutil.Every(time.Second))
	if line := grepLine(logs.String(), "running autonomously"); !strings.Contains(line, `"works"=1`) {
		t.Errorf("the autonomy report does not count the one Work the agent holds: %s", line)
	}
	if err := testutil.ProbeIs(probeAddr, "/readyz/"+agentsetup.CheckHubStream, http.StatusOK)(); err != nil {
		t.Errorf("the hub-stream check of an autonomous agent: %v", err)
	}
	f.startSyncHub(t, syncAddr)
	eventually(t, "the agent's stream back with the hub", 60*time.Second, connected)
	testutil.Eventually(t, "the agent logging that autonomy ended", 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "autonomy ended") {
			return errors.New(`no "autonomy ended" in the agent's log yet`)
		}
		return nil
	}, every)
	testutil.Eventually(t, "the reconnected agent ready", 30*time.Second, ready, every)

	// Member apiserver unreachable.
	relay.cut()
	testutil.Eventually(t, "/readyz/member-apiserver failing with the member unreachable", 30*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz/"+agentsetup.CheckMemberAPIServer, http.StatusInternalServerError, "member apiserver", "does not answer"), every)
	if err := testutil.ProbeIs(probeAddr, "/readyz?verbose", http.StatusInternalServerError, "[-]"+agentsetup.CheckMemberAPIServer+" failed")(); err != nil {
		t.Errorf("readiness with the member unreachable: %v", err)
	}
	if err := healthy(); err != nil {
		t.Errorf("liveness with the member unreachable: %v", err)
	}
	relay.restore(t)
	testutil.Eventually(t, "the agent ready again with its member reachable", 60*time.Second, ready, every)
	eventually(t, "the agent's stream back once its member answers", 60*time.Second, connected)

	// The hub refuses the agent.
	kp, err := pki.LoadKeyPair(filepath.Join(f.certDir, pki.AgentCertFile("member-1")), filepath.Join(f.certDir, pki.AgentKeyFile("member-1")))
	if err != nil {
		t.Fatal(err)
	}
	setRevoked := func(fingerprints []string) {
		t.Helper()
		mc := &flotillav1.MemberCluster{}
		if err := f.hub.Get(ctx, client.ObjectKey{Name: "member-1"}, mc); err != nil {
			t.Fatal(err)
		}
		before := mc.DeepCopy()
		mc.Spec.RevokedCertificates = fingerprints
		if err := f.hub.Patch(ctx, mc, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
	}
	setRevoked([]string{syncserver.Fingerprint(kp.Cert)})
	testutil.Eventually(t, "/readyz/hub-stream failing, saying the hub refused the agent", 30*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz/"+agentsetup.CheckHubStream, http.StatusInternalServerError, "refused this agent", "stood down"), every)
	if err := healthy(); err != nil {
		t.Errorf("liveness with the agent refused: %v", err)
	}
	setRevoked(nil)
	eventually(t, "the agent's stream back once its certificate is no longer revoked", 60*time.Second, connected)
	testutil.Eventually(t, "the agent ready again once the hub accepts it", 30*time.Second, ready, every)
}

// relay forwards TCP connections from a loopback address to target, and
// can be cut (its listener and every connection closed: the target is
// unreachable) and restored on the same address.
type relay struct {
	addr, target string

	mu    sync.Mutex
	lis   net.Listener
	conns map[net.Conn]struct{}
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	r := &relay{target: target, conns: map[net.Conn]struct{}{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	r.serve(lis)
	t.Cleanup(r.cut)
	return r
}

func (r *relay) serve(lis net.Listener) {
	r.mu.Lock()
	r.lis = lis
	r.mu.Unlock()
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", r.target, 5*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			r.conns[in], r.conns[out] = struct{}{}, struct{}{}
			r.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every relayed connection.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lis != nil {
		r.lis.Close()
		r.lis = nil
	}
	for c := range r.conns {
		c.Close()
		delete(r.conns, c)
	}
}

// restore listens on the relay's address again.
func (r *relay) restore(t *testing.T) {
	t.Helper()
	var lis net.Listener
	testutil.Eventually(t, "listening on the relay's address "+r.addr+" again", 10*time.Second, func() error {
		var err error
		lis, err = net.Listen("tcp", r.addr)
		return err
	})
	r.serve(lis)
}

func grepLine(s, substr string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}
