// Package join gives the agent its identity from Secrets in its own
// namespace: it joins a hub with a bootstrap token, keeps its key and
// certificate in a Secret, and renews the certificate before it expires.
//
// `kubectl flotilla join` writes the bootstrap Secret
// (flotilla-agent-bootstrap: hub address, token, the hub CA's hash,
// cluster name, labels, region, zone, provider). The agent then
//
//  1. makes an ECDSA P-256 key and stores it in the credentials Secret
//     (flotilla-agent-credentials) before anything is sent, so a restart
//     reuses it; the key never leaves the member;
//  2. dials the hub trusting only the CA whose public key hashes to the
//     pinned hash, found in the chain the hub sends (bootstrap.VerifyPinned),
//     so the token goes to that hub or to none;
//  3. calls Bootstrap/Register with the token and a PKCS #10 request with
//     one URI SAN, flotilla://cluster/<name>, and stores the name of the
//     request the hub created: a restart polls that request instead of
//     registering again (a single-use token works once);
//  4. polls Bootstrap/Certificate, 1 s doubling to 10 s, until the
//     certificate is ISSUED (stored with the pinned CA; the bootstrap
//     Secret is then deleted) or DENIED (an Event on the credentials
//     Secret, and the agent exits with the hub's reason).
//
// At 80 % of the certificate's lifetime (RenewAt) the leader makes a new
// key, calls Bootstrap/Renew authenticated by its current certificate,
// polls for the new one, writes key and certificate to the Secret and
// swaps them in the Source the sync client's TLS configuration reads at
// every handshake (pki.DynamicClientTLSConfig). An open stream is not
// touched; the next connection presents the new certificate. A failed
// renewal is retried with backoff while the old certificate lasts.
//
// The hub ends a stream when the certificate that opened it expires
// (pkg/sync/server), so the stream opened before a renewal ends at the
// old certificate's NotAfter, 20 % of a lifetime later; the agent then
// reconnects with the renewed certificate, and the hub's snapshot starts
// from the Works the agent says it holds.
//
// Only the leader (the replica that holds the stream) runs the Keeper,
// and so only it joins, renews and writes the Secret. The Keeper's first
// step is to read the Secrets afresh, so a replica that becomes leader
// later starts from the newest certificate its predecessor stored; a
// standby needs no watch.
//
// Decide holds the decision of where the identity comes from at start
// (the credentials Secret, a join, the resumption of a pending request,
// or the --cert-file flags of flotilla-pki); RenewAt the renewal time.
// Both are pure and table-tested.
package join
