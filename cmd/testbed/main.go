// Command testbed runs Flotilla's local multi-cluster testbed: a hub cluster
// and N member clusters as real control-plane processes on loopback.
//
//	testbed run   [flags]   start, print kubeconfigs, stop on Ctrl-C
//	testbed up    [flags]   the same, in the background
//	testbed down  [--dir]   stop a background testbed
//	testbed stop-member NAME / start-member NAME   simulate losing a member
//	testbed status [--dir]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed/supervisor"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		usage()
		return fmt.Errorf("a command is required")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("testbed "+cmd, flag.ContinueOnError)
	opts := supervisor.Options{}
	fs.StringVar(&opts.Dir, "dir", ".testbed", "folder for the clusters' files and the testbed state")
	fs.StringVar(&opts.BinDir, "bin", "", "folder with the control-plane binaries (default: bin/ of the repository)")
	fs.IntVar(&opts.Members, "members", 3, "number of member clusters")
	fs.StringVar(&opts.CRDDir, "crds", "deploy/hub/crds", "CRDs to install into the hub (empty: none)")
	flotilla := fs.Bool("flotilla", false, "also run the hub and an agent per member (bin/hub, bin/agent) with generated certificates")
	apply := fs.String("apply", "", "comma-separated MyApp manifests to apply to the hub once Flotilla runs (with --flotilla)")
	watch := fs.Bool("watch", false, "show a live table of members and MyApps until Ctrl-C (with --flotilla)")
	pushMembers := fs.String("push-members", "", "comma-separated members the hub pushes to (syncMode Push, no agent), e.g. member-3 (with --flotilla)")
	// Allow the member name before the flags: stop-member member-2 --dir d.
	var positional []string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		positional, args = args[:1], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	positional = append(positional, fs.Args()...)
	if *flotilla {
		// The whole of Flotilla on the clusters; `up` passes the same
		// choice on to the background `run`.
		demo := fleet.Demo{Watch: *watch}
		opts.RunArgs = []string{"--flotilla"}
		if *apply != "" {
			demo.Apply = strings.Split(*apply, ",")
			opts.RunArgs = append(opts.RunArgs, "--apply", *apply)
		}
		if *pushMembers != "" {
			demo.PushMembers = strings.Split(*pushMembers, ",")
			opts.RunArgs = append(opts.RunArgs, "--push-members", *pushMembers)
		}
		opts.Start = demo.Start
	}
	switch cmd {
	case "run":
		return supervisor.Run(ctx, opts, os.Stdout)
	case "up":
		return supervisor.Up(ctx, opts, os.Stdout)
	case "down":
		return supervisor.Down(ctx, opts.Dir, os.Stdout)
	case "status":
		return supervisor.Status(ctx, opts.Dir, os.Stdout)
	case "stop-member", "start-member":
		if len(positional) != 1 {
			return fmt.Errorf("%s takes one member name", cmd)
		}
		action := "stop"
		if cmd == "start-member" {
			action = "start"
		}
		return supervisor.Member(ctx, opts.Dir, positional[0], action, os.Stdout)
	default:
		usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: testbed COMMAND [flags]

Commands:
  run            start a hub and --members member clusters; stop them on Ctrl-C
  up             the same in the background (state in --dir)
  down           stop a background testbed
  status         show the clusters of a background testbed
  stop-member N  stop member N's control plane (its data is kept)
  start-member N start it again
`)
}
