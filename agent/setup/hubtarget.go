package setup

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"google.golang.org/grpc/resolver"
)

// hubListScheme is the gRPC target scheme of a list of hub replicas given
// as IP:port ("flotilla-hubs:///10.0.0.1:9443,10.0.0.2:9443"). gRPC's
// naming document has ipv4: and ipv6: schemes for such lists, but grpc-go
// does not implement them: it falls back to DNS, which fails on the list
// ("too many colons in address"). So the agent resolves the list itself.
const hubListScheme = "flotilla-hubs"

// grpc-go asks that resolvers be registered at init time only.
func init() { resolver.Register(hubListBuilder{}) }

// hubTarget turns --hub-address into a gRPC target and the TLS server
// name: "host:port" as it is, "ip:port,ip:port" as a hubListScheme target,
// and a target with a scheme ("dns:///name:port") as it is. With several
// addresses gRPC's pick-first balancing reaches whichever hub replica
// serves: only the leader listens. The server name is the (first) host.
func hubTarget(addr string) (target, serverName string, err error) {
	if strings.Contains(addr, "://") {
		// A gRPC target such as dns:///flotilla-hub-sync.flotilla-system:9443:
		// a name that resolves to every hub replica, of which pick-first
		// connects to the one that listens (the leader).
		u, err := url.Parse(addr)
		if err != nil {
			return "", "", fmt.Errorf("--hub-address %q: %w", addr, err)
		}
		host, _, err := net.SplitHostPort(firstAddress(strings.TrimPrefix(u.Path, "/")))
		if err != nil {
			return "", "", fmt.Errorf("--hub-address %q: %w", addr, err)
		}
		return addr, host, nil
	}
	parts := strings.Split(addr, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
		host, _, err := net.SplitHostPort(parts[i])
		if err != nil {
			return "", "", fmt.Errorf("--hub-address %q: %w", parts[i], err)
		}
		if i == 0 {
			serverName = host
		}
		if len(parts) > 1 && net.ParseIP(host) == nil {
			return "", "", fmt.Errorf("--hub-address: several addresses must be IP:port (got %q); for host names use one name that resolves to every hub replica", parts[i])
		}
	}
	if len(parts) == 1 {
		return parts[0], serverName, nil
	}
	return hubListScheme + ":///" + strings.Join(parts, ","), serverName, nil
}

// firstAddress is the first of a comma-separated list of addresses.
func firstAddress(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(first)
}

// hubListBuilder resolves a hubListScheme target to its addresses, in the
// order given (pick-first tries them in that order). The list never
// changes, so it is resolved once.
type hubListBuilder struct{}

var (
	_ resolver.Builder            = hubListBuilder{}
	_ resolver.AuthorityOverrider = hubListBuilder{}
)

func (hubListBuilder) Scheme() string { return hubListScheme }

func (hubListBuilder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	var endpoints []resolver.Endpoint
	for a := range strings.SplitSeq(target.Endpoint(), ",") {
		if a = strings.TrimSpace(a); a != "" {
			endpoints = append(endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
		}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("gRPC target %q names no address", target.URL.String())
	}
	if err := cc.UpdateState(resolver.State{Endpoints: endpoints}); err != nil {
		return nil, fmt.Errorf("resolving %q: %w", target.URL.String(), err)
	}
	return hubListResolver{}, nil
}

// OverrideAuthority makes the first address the :authority, not the
// whole comma-separated list (which is no valid authority).
func (hubListBuilder) OverrideAuthority(target resolver.Target) string {
	return firstAddress(target.Endpoint())
}

// hubListResolver has nothing to do after Build: the list is fixed.
type hubListResolver struct{}

func (hubListResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (hubListResolver) Close()                                {}
