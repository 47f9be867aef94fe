package cli

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

func TestLoadBalancerAddress(t *testing.T) {
	svc := func(typ corev1.ServiceType, ports []corev1.ServicePort, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "flotilla-system", Name: "flotilla-hub"}}
		s.Spec.Type, s.Spec.Ports = typ, ports
		s.Status.LoadBalancer.Ingress = ingress
		return s
	}
	sync := []corev1.ServicePort{{Name: "metrics", Port: 8080}, {Name: hubSyncPortName, Port: 9443}}
	for _, tc := range []struct {
		name, want, wantErr string
		svc                 *corev1.Service
	}{
		{"ip", "198.51.100.1:9443", "", svc(corev1.ServiceTypeLoadBalancer, sync, corev1.LoadBalancerIngress{IP: "198.51.100.1"})},
		{"hostname", "hub.example.com:9443", "", svc(corev1.ServiceTypeLoadBalancer, sync, corev1.LoadBalancerIngress{Hostname: "hub.example.com"})},
		{"ipv6", "[2001:db8::1]:9443", "", svc(corev1.ServiceTypeLoadBalancer, sync, corev1.LoadBalancerIngress{IP: "2001:db8::1"})},
		{"one unnamed port", "198.51.100.1:443", "", svc(corev1.ServiceTypeLoadBalancer, []corev1.ServicePort{{Port: 443}}, corev1.LoadBalancerIngress{IP: "198.51.100.1"})},
		{"cluster ip", "", "not LoadBalancer", svc(corev1.ServiceTypeClusterIP, sync)},
		{"no address yet", "", "no LoadBalancer address yet", svc(corev1.ServiceTypeLoadBalancer, sync)},
		{"no sync port", "", "no port grpc-sync", svc(corev1.ServiceTypeLoadBalancer, []corev1.ServicePort{{Name: "a", Port: 1}, {Name: "b", Port: 2}}, corev1.LoadBalancerIngress{IP: "198.51.100.1"})},
	} {
		got, err := LoadBalancerAddress(tc.svc)
		if got != tc.want || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: got %q, %v; want %q and an error containing %q", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestJoinOptionsCheck(t *testing.T) {
	ok := JoinOptions{HubAddress: "hub.example.com:9443", Token: "abcdef.0123456789abcdef", CAHash: "sha256:" + strings.Repeat("ab", 32), ClusterName: "member-1"}
	for _, tc := range []struct {
		name, flag string
		change     func(*JoinOptions)
	}{
		{"valid", "", func(*JoinOptions) {}},
		{"several hub addresses", "", func(o *JoinOptions) { o.HubAddress = "10.0.0.1:9443,10.0.0.2:9443" }},
		{"no hub", "--hub", func(o *JoinOptions) { o.HubAddress = "" }},
		{"hub without port", "--hub", func(o *JoinOptions) { o.HubAddress = "hub.example.com" }},
		{"second hub bad", "--hub", func(o *JoinOptions) { o.HubAddress = "10.0.0.1:9443,10.0.0.2:x" }},
		{"token", "--token", func(o *JoinOptions) { o.Token = "abcdef" }},
		{"hash prefix", "--ca-hash", func(o *JoinOptions) { o.CAHash = strings.Repeat("ab", 32) }},
		{"hash short", "--ca-hash", func(o *JoinOptions) { o.CAHash = "sha256:abcd" }},
		{"no name", "--cluster-name", func(o *JoinOptions) { o.ClusterName = "" }},
		{"bad name", "--cluster-name", func(o *JoinOptions) { o.ClusterName = "Member_1" }},
		{"long name", "--cluster-name", func(o *JoinOptions) { o.ClusterName = strings.Repeat("a", flotillav1.MaxClusterNameLength+1) }},
		{"bad label key", "--labels", func(o *JoinOptions) { o.Labels = map[string]string{"a b": "c"} }},
		{"bad label value", "--labels", func(o *JoinOptions) { o.Labels = map[string]string{"tier": "a b"} }},
	} {
		o := ok
		tc.change(&o)
		_, err := o.check()
		switch {
		case tc.flag == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.flag != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.flag+":")):
			t.Errorf("%s: error %v, want one starting with %s:", tc.name, err, tc.flag)
		}
	}
}

func TestClaimNamespace(t *testing.T) {
	for _, tc := range []struct {
		name string
		ns   *corev1.Namespace
		want bool
	}{
		{"join creates it", nil, true},
		{"join created it before", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelJoinCreated: "true"}}}, true},
		{"there before join", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "infra"}}}, false},
	} {
		if got := claimNamespace(tc.ns); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestHubJoinState(t *testing.T) {
	mc := func(a flotillav1.Acceptance, ready metav1.ConditionStatus) *flotillav1.MemberCluster {
		m := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: flotillav1.MemberClusterSpec{Acceptance: a}}
		if ready != "" {
			m.Status.Conditions = []metav1.Condition{{Type: flotillav1.ConditionReady, Status: ready}}
		}
		return m
	}
	deleting := mc(flotillav1.AcceptanceAccepted, metav1.ConditionTrue)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name string
		mc   *flotillav1.MemberCluster
		want JoinState
		msg  string
	}{
		{"not registered", nil, JoinWaiting, "does not exist yet"},
		{"pending", mc(flotillav1.AcceptancePending, ""), JoinPending, "pending: run `kubectl flotilla accept m` on the hub"},
		{"denied", mc(flotillav1.AcceptanceDenied, ""), JoinDenied, "denied"},
		{"accepted, not connected", mc(flotillav1.AcceptanceAccepted, ""), JoinWaiting, "waiting for its agent"},
		{"accepted by default, not Ready", mc("", metav1.ConditionFalse), JoinWaiting, "waiting for its agent"},
		{"ready", mc(flotillav1.AcceptanceAccepted, metav1.ConditionTrue), JoinJoined, "joined: m is Ready"},
		{"deleting", deleting, JoinDenied, "being deleted"},
	} {
		got, msg := HubJoinState("m", tc.mc)
		if got != tc.want || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %v %q, want %v and %q", tc.name, got, msg, tc.want, tc.msg)
		}
	}
}

func TestMemberJoinState(t *testing.T) {
	creds := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	identity := &corev1.ConfigMap{Data: map[string]string{"clusterName": "m"}}
	other := &corev1.ConfigMap{Data: map[string]string{"clusterName": "x"}}
	resp := func(s syncv1.CertificateResponse_State) *syncv1.CertificateResponse {
		return &syncv1.CertificateResponse{State: s, Message: "because"}
	}
	for _, tc := range []struct {
		name     string
		creds    *corev1.Secret
		identity *corev1.ConfigMap
		cert     *syncv1.CertificateResponse
		want     JoinState
	}{
		{"nothing yet", nil, nil, nil, JoinWaiting},
		{"registered, not asked", creds(map[string]string{"request": "csr-1"}), nil, nil, JoinWaiting},
		{"pending", creds(map[string]string{"request": "csr-1"}), nil, resp(syncv1.CertificateResponse_PENDING), JoinPending},
		{"denied", creds(map[string]string{"request": "csr-1"}), nil, resp(syncv1.CertificateResponse_DENIED), JoinDenied},
		{"issued, not stored", creds(map[string]string{"request": "csr-1"}), nil, resp(syncv1.CertificateResponse_ISSUED), JoinWaiting},
		{"certificate, not connected", creds(map[string]string{"tls.crt": "x"}), nil, nil, JoinWaiting},
		{"certificate, connected as another", creds(map[string]string{"tls.crt": "x"}), other, nil, JoinWaiting},
		{"joined", creds(map[string]string{"tls.crt": "x"}), identity, nil, JoinJoined},
	} {
		if got, msg := MemberJoinState("m", tc.creds, tc.identity, tc.cert); got != tc.want || msg == "" {
			t.Errorf("%s: %v %q, want %v and a message", tc.name, got, msg, tc.want)
		}
	}
}

func TestTokenViews(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	views := TokenViews([]bootstrap.Info{
		{ID: "aaaaaa", Expiration: &future},
		{ID: "bbbbbb", Expiration: &past},
		{ID: "cccccc", SingleUse: true, UsedBy: []string{"m1"}},
		{ID: "dddddd", SingleUse: true, AutoAccept: true},
		{ID: "eeeeee", UsedBy: []string{"m1", "m2"}},
	}, now)
	want := []struct{ state, usage, expires string }{
		{TokenValid, "multi", future.Format(time.RFC3339)},
		{TokenExpired, "multi", past.Format(time.RFC3339)},
		{TokenUsed, "single", "never"},
		{TokenValid, "single", "never"},
		{TokenValid, "multi", "never"},
	}
	for i, w := range want {
		if v := views[i]; v.State != w.state || v.Usage != w.usage || v.Expires != w.expires {
			t.Errorf("%s: %s %s %s, want %s %s %s", v.ID, v.State, v.Usage, v.Expires, w.state, w.usage, w.expires)
		}
	}
}

func TestCheckOutput(t *testing.T) {
	for _, o := range []string{"", "wide", "json", "yaml"} {
		if err := checkOutput(o); err != nil {
			t.Errorf("-o %q: %v", o, err)
		}
	}
	if err := checkOutput("jsonpath"); err == nil || !strings.Contains(err.Error(), "-o") {
		t.Errorf("-o jsonpath: %v, want an error naming -o", err)
	}
}
