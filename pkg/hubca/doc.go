// Package hubca keeps the hub's CA and the hub's serving certificates.
//
// The CA lives in a Secret in the hub's namespace (flotilla-hub-ca:
// tls.crt, tls.key). The hub signs agent certificates and its own serving
// certificates with it; agents pin it by the hash of its public key
// (bootstrap.CAHash). `kubectl flotilla init` and the hub both call
// Ensure, so whichever runs first creates it and the other reads it.
//
// The serving certificate is never stored: a Rotator issues it in memory
// from the CA at start and again at 80 % of its lifetime (RenewAt), and
// hands the current one to every TLS handshake of the sync server and the
// webhook server (GetCertificate). Every replica issues its own; they all
// chain to the one CA, which is what agents and the apiserver trust. The
// chain a Rotator serves is [leaf, CA]: a joining agent has no CA yet, only
// its hash, and finds the CA to pin among the certificates the hub sends
// (bootstrap.VerifyPinned).
//
// A hub run with provided certificates (--cert-dir: ca.crt, hub.crt,
// hub.key, from flotilla-pki or cert-manager) serves them through Files,
// which rereads the directory on a short poll, so a certificate rotated
// on disk (a Secret volume updated by cert-manager, or by hand) is served
// from the next handshake on without a restart.
//
// Established connections are not touched by a rotation: TLS checks the
// certificate at the handshake only, so a stream opened with the previous
// certificate goes on, and the next connection gets the new one.
package hubca
