// Package client is the agent side of the sync protocol: it holds one
// stream to the hub, reconnecting with exponential backoff and jitter,
// checks each hub's fleet identity against the member's record (Identity)
// before anything else, hands what the hub sends to an Applier, reports
// how each prune went (held by the Applier's deletion brake, or done), and
// sends status reports and heartbeats. The protocol is described in pkg/sync.
//
//	c, err := client.New(client.Config{
//		Address: "hub.example:9443", TLS: tlsConfig, Applier: applier,
//		Identity: record, // which fleet and cluster this agent serves
//		Resources: summarise, AgentVersion: version.String(),
//	})
//	go c.Run(ctx) // returns when ctx ends
//	// whenever the applier learns something about a Work:
//	c.ReportStatus(workName, &status)
package client
