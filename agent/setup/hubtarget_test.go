package setup

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

func TestHubTarget(t *testing.T) {
	cases := []struct {
		name, addr         string
		target, serverName string
		wantErr            bool
	}{
		{name: "host name and port", addr: "hub.example:9443",
			target: "hub.example:9443", serverName: "hub.example"},
		{name: "IP and port", addr: "10.0.0.1:9443",
			target: "10.0.0.1:9443", serverName: "10.0.0.1"},
		{name: "IPv6 and port", addr: "[fd00::1]:9443",
			target: "[fd00::1]:9443", serverName: "fd00::1"},
		{name: "one address with spaces around it", addr: " hub.example:9443 ",
			target: "hub.example:9443", serverName: "hub.example"},
		{name: "several IPs", addr: "10.0.0.1:9443,10.0.0.2:9443,10.0.0.3:9443",
			target: "flotilla-hubs:///10.0.0.1:9443,10.0.0.2:9443,10.0.0.3:9443", serverName: "10.0.0.1"},
		{name: "several IPs with spaces", addr: "10.0.0.1:9443, 10.0.0.2:9443",
			target: "flotilla-hubs:///10.0.0.1:9443,10.0.0.2:9443", serverName: "10.0.0.1"},
		{name: "several IPv6 addresses", addr: "[fd00::1]:9443,[fd00::2]:9443",
			target: "flotilla-hubs:///[fd00::1]:9443,[fd00::2]:9443", serverName: "fd00::1"},
		{name: "dns target", addr: "dns:///flotilla-hub-sync.flotilla-system:9443",
			target: "dns:///flotilla-hub-sync.flotilla-system:9443", serverName: "flotilla-hub-sync.flotilla-system"},
		{name: "dns target with its own DNS server", addr: "dns://10.96.0.10:53/flotilla-hub-sync.flotilla-system:9443",
			target: "dns://10.96.0.10:53/flotilla-hub-sync.flotilla-system:9443", serverName: "flotilla-hub-sync.flotilla-system"},
		{name: "an address list as a target", addr: "flotilla-hubs:///10.0.0.1:9443,10.0.0.2:9443",
			target: "flotilla-hubs:///10.0.0.1:9443,10.0.0.2:9443", serverName: "10.0.0.1"},
		{name: "empty", addr: "", wantErr: true},
		{name: "no port", addr: "hub.example", wantErr: true},
		{name: "several host names", addr: "hub-1.example:9443,hub-2.example:9443", wantErr: true},
		{name: "an IP and a host name", addr: "10.0.0.1:9443,hub-2.example:9443", wantErr: true},
		{name: "trailing comma", addr: "10.0.0.1:9443,", wantErr: true},
		{name: "dns target without a port", addr: "dns:///flotilla-hub-sync", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target, serverName, err := hubTarget(tc.addr)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("hubTarget(%q) = %q, %q; want an error", tc.addr, target, serverName)
				}
				return
			}
			if err != nil {
				t.Fatalf("hubTarget(%q): %v", tc.addr, err)
			}
			if target != tc.target || serverName != tc.serverName {
				t.Errorf("hubTarget(%q) = %q, %q; want %q, %q", tc.addr, target, serverName, tc.target, tc.serverName)
			}
		})
	}
}

// TestHubTargetReachesTheReplicaThatServes dials the target made of an
// address list with gRPC, as the sync client does, and checks that it
// reaches the one replica that listens wherever it stands in the list.
func TestHubTargetReachesTheReplicaThatServes(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	authorities := make(chan string, 16)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if a := md.Get(":authority"); len(a) == 1 {
			authorities <- a[0]
		}
		return handler(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	live := lis.Addr().String()
	// A replica that does not serve (not the leader): nothing listens.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	for _, addr := range []string{deadAddr + "," + live, live + "," + deadAddr} {
		t.Run(addr, func(t *testing.T) {
			target, _, err := hubTarget(addr)
			if err != nil {
				t.Fatalf("hubTarget(%q): %v", addr, err)
			}
			conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatalf("grpc.NewClient(%q): %v", target, err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if err != nil {
				t.Fatalf("health check through %q: %v", target, err)
			}
			if res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health check through %q: %v, want SERVING", target, res.GetStatus())
			}
			// The :authority is the first address, not the whole list.
			select {
			case got := <-authorities:
				if want := firstAddress(addr); got != want {
					t.Errorf(":authority = %q, want %q", got, want)
				}
			default:
				t.Error("the hub saw no :authority")
			}
		})
	}
}
