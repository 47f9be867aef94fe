// Package bootstrap holds the pure parts of joining a member cluster to a
// hub: bootstrap tokens (format, their Secret on the hub, the checks the
// hub makes when a joining agent presents one) and the CA pin (the hash of
// the hub CA's public key that a join command carries, kubeadm-style, so a
// joining agent trusts exactly that hub).
//
// A token is <id>.<secret>: 6 and 16 characters of [a-z0-9]. The hub keeps
// it in a Secret flotilla-token-<id> of type flotilla.dev/bootstrap-token
// in its namespace, with the secret stored only as its SHA-256: a reader of
// the Secret cannot join a cluster with it, and `token create` shows the
// whole token once.
package bootstrap
