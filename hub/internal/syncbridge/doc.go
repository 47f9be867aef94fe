// Package syncbridge connects pkg/sync's hub-side server to the hub's
// cluster state: a WorkSource backed by the manager's Work informer (whose
// events tell the server what changed), a ClusterRegistry backed by the
// MemberCluster cache, with its RevocationChecker and AdmissionChecker
// (Accepted members only, and a join-issued certificate only for the
// MemberCluster UID it names), whose informer tells the server when a
// MemberCluster's spec changes or it goes (WatchClusters), and a
// StatusSink that writes agents' reports into Work status, coalesced per
// Work and written by a few workers in parallel.
package syncbridge
