// Package ssa builds the bodies of server-side apply requests, the one way
// Flotilla writes what it owns: the hub's Works and their status, and the
// objects an agent applies in its member.
//
// A server-side apply body must hold only the fields its field manager
// means to own. Converting a typed object to unstructured content adds
// fields a client never sets (status: {}, creationTimestamp: null in
// metadata and in a pod template's metadata); applying them would claim
// them, or fail. Unstructured and StatusUnstructured drop them, plus any
// further paths the caller names, in one place instead of by hand at each
// call site (the shape of cluster-api's internal/util/ssa).
package ssa
