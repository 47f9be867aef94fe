// Package csr is the hub's approver and signer of agent certificates: one
// controller over the CertificateSigningRequests of signerName
// flotilla.dev/agent, which the hub's Bootstrap service creates for a
// Register or a Renew it authenticated.
//
// It approves a request only when the hub itself created it (its
// spec.username is the hub's own, learnt once with a SelfSubjectReview)
// and the MemberCluster its flotilla.dev/cluster label names is Accepted;
// it denies one whose member is Denied, and lets one whose member is
// Pending wait (MemberCluster changes wake it, so `kubectl flotilla
// accept` is all it takes). It signs approved requests with the hub CA
// (pki.SignAgentCSR: the member's UID in the certificate, the hub's agent
// lifetime at most), and sets Failed on one it cannot sign. It deletes
// this signer's requests an hour after they were decided, and all of a
// member's requests when the MemberCluster goes.
//
// What to do with a request is a pure function (decide) with a table
// test; Reconcile only reads the world and carries the decision out.
package csr
