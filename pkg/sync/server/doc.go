// Package server is the hub side of the sync protocol: a gRPC server that
// introduces the hub by its fleet id, streams each member cluster's Works
// to its agent, and passes the agent's status reports, heartbeats,
// refusals and prune reports on to the hub, and an admin's prune
// confirmations back (ConfirmPrune). It paces the deletions it sends each
// agent (Config.DeleteRate, DeleteBurst). The protocol, flow control, the
// pacing and what happens when a queue is full are described in pkg/sync.
//
// Every RPC must present a verified agent certificate (auth.go), whose
// cluster the ClusterRegistry knows, does not list as revoked and admits
// (AdmissionChecker: the hub's admits Accepted members and join-issued
// certificates of the current MemberCluster UID), with one exception:
// given Config.Bootstrap, the server also serves the Bootstrap service, and
// its Register and Certificate RPCs, which a joining agent makes before it
// has a certificate, pass without one, limited per peer address and in
// size (bootstrap.go). Renew needs the certificate like Sync does.
//
// The server depends only on the interfaces in interfaces.go, so tests run
// it without a cluster:
//
//	srv, err := server.New(server.Config{
//		FleetID: fleetID, // or SetFleetID before Serve
//		Works: works, Clusters: clusters, Status: statusSink, Agents: agentSink,
//		TLS: tlsConfig, Registerer: registry,
//	})
//	go srv.Serve(listener)
//	defer srv.Stop()
//	// from the Work informer's event handlers:
//	srv.WorkChanged(cluster, workName)
package server
