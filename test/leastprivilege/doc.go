// Package leastprivilege tests the RBAC deploy/ ships for the agent and
// the hub against a real apiserver (envtest with RBAC authorization): the
// generated roles and the bindings are read from deploy/ (test/deployrbac),
// installed, and then both SubjectAccessReviews and real requests made with
// the service accounts' own tokens check what each identity may and may not
// do. Every refusal has a positive control beside it, so the tests fail
// whether the RBAC grows too wide or too narrow. The hub's own run with
// the shipped RBAC (webhook caBundle, secure metrics) is tested in
// hub/setup, which may reach the hub's internal packages.
package leastprivilege
