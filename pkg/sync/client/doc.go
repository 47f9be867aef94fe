// Package client is the agent side of the sync protocol: it holds one
// stream to the hub, reconnecting with exponential backoff and jitter,
// hands what the hub sends to an Applier, and sends status reports and
// heartbeats. The protocol is described in pkg/sync.
//
//	c, err := client.New(client.Config{
//		Address: "hub.example:9443", TLS: tlsConfig, Applier: applier,
//		Resources: summarise, AgentVersion: version.String(),
//	})
//	go c.Run(ctx) // returns when ctx ends
//	// whenever the applier learns something about a Work:
//	c.ReportStatus(workName, &status)
package client
