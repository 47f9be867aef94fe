// Package pki makes and loads the certificates Flotilla's hub and agents
// use for mutual TLS, and builds *tls.Config values from them.
//
// There is one CA per installation. It signs one hub (server) certificate,
// valid for 127.0.0.1, ::1 and localhost plus the names the hub is reached
// by, and one client certificate per member cluster. An agent's cluster is
// named by a URI SAN of the form flotilla://cluster/<name> in its client
// certificate: the hub takes the cluster from there and from nowhere else,
// so a certificate for cluster A can never speak for cluster B.
//
// Keys are ECDSA P-256 and everything is written as PEM files. The Ensure*
// functions are idempotent: they keep files that are still valid for what
// was asked and issue new ones otherwise, which is what the testbed, the
// demo and the cmd/flotilla-pki command need.
package pki
