// Package admission tests the admission policies shipped in deploy/hub
// as the files are, against a real kube-apiserver (envtest): the
// ValidatingAdmissionPolicy that lets only the hub's service account write
// Works (works_admission_policy.yaml). Identities are played with
// impersonation, so RBAC and admission run as they would for those users.
package admission
