// Package bootstrap is the hub's side of joining: the gRPC Bootstrap
// service (pkg/sync/syncv1) that the sync server serves beside Sync.
//
// Register turns a bootstrap token and a PKCS #10 request into a
// MemberCluster (Pending unless the token auto-accepts) and a Kubernetes
// CertificateSigningRequest with signerName flotilla.dev/agent; Renew does
// the same for an agent that proves its current certificate; Certificate
// reports on such a request. The hub's CSR controller
// (hub/internal/controllers/csr) approves and signs the requests, so the
// certificate an agent gets always went through the apiserver's CSR API,
// where an admin can see, approve or deny it.
//
// Everything Register decides before it writes is a pure function
// (validateRegister, reuse) with table tests. Its writes are ordered so a
// refusal leaves nothing behind: it first claims the token (an update with
// the Secret's resourceVersion, so two concurrent uses of a single-use
// token cannot both win), then creates the MemberCluster and the request,
// and undoes the claim and the MemberCluster when a later step fails.
package bootstrap
