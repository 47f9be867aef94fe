package pki

import "net"

// HubNames are the IP and DNS SANs IssueHub gives a hub certificate for
// hosts: loopback (127.0.0.1, ::1, localhost) first, then hosts, without
// duplicates. pkg/hubca issues the hub's rotating serving certificates
// with the same names.
func HubNames(hosts []string) ([]net.IP, []string) { return hubNames(hosts) }
