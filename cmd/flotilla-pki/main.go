// Command flotilla-pki creates the CA and the certificates Flotilla's hub
// and agents use for mutual TLS, as PEM files in one directory:
//
//	flotilla-pki -dir certs ca                    # ca.crt, ca.key
//	flotilla-pki -dir certs hub -host hub.example # hub.crt, hub.key
//	flotilla-pki -dir certs agent east west       # agent-east.crt, agent-east.key, ...
//
// Every step is idempotent: a file that is still valid for what was asked
// is kept, anything else is issued anew (the CA itself is never replaced).
// hub and agent create the CA first when the directory has none.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-pki:", err)
		os.Exit(1)
	}
}

const usage = `usage: flotilla-pki [-dir DIR] COMMAND [ARGS]

DIR (default ./certs) is created with mode 0700, or made so; keys are 0600.

commands:
  ca                     create the CA (ca.crt, ca.key) if DIR has none
  hub [-host NAME]...    issue the hub's serving certificate (hub.crt, hub.key),
                         valid for 127.0.0.1, ::1, localhost and each NAME
  agent CLUSTER...       issue each cluster's agent client certificate
                         (agent-CLUSTER.crt, agent-CLUSTER.key), naming the
                         cluster in the URI SAN flotilla://cluster/CLUSTER
`

// stringList is a repeatable flag that also splits on commas.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, strings.Split(v, ",")...)
	return nil
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("flotilla-pki", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, usage) }
	// Not "." by default: the key directory is made private (mode 0700),
	// which must not happen to whatever directory the command runs in.
	dir := fs.String("dir", "certs", "directory holding the CA and the certificates (created, or made private, with mode 0700)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command given")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]

	report := func(what string, issued bool) {
		if issued {
			fmt.Fprintf(out, "issued %s\n", what)
		} else {
			fmt.Fprintf(out, "kept %s (still valid)\n", what)
		}
	}
	switch cmd {
	case "ca":
		if len(rest) > 0 {
			return fmt.Errorf("ca takes no arguments, got %q", rest)
		}
		if _, err := pki.EnsureCA(*dir); err != nil {
			return err
		}
		fmt.Fprintf(out, "CA ready in %s\n", *dir)
	case "hub":
		hfs := flag.NewFlagSet("hub", flag.ContinueOnError)
		hfs.SetOutput(out)
		var hosts stringList
		hfs.Var(&hosts, "host", "a DNS name or IP address the hub is reached by (repeatable, or comma-separated)")
		if err := hfs.Parse(rest); err != nil {
			return err
		}
		if hfs.NArg() > 0 {
			return fmt.Errorf("hub takes only -host flags, got %q", hfs.Args())
		}
		ca, err := pki.EnsureCA(*dir)
		if err != nil {
			return err
		}
		issued, err := pki.EnsureHub(*dir, ca, hosts)
		if err != nil {
			return err
		}
		report(pki.HubCertFile, issued)
	case "agent":
		if len(rest) == 0 {
			return errors.New("agent needs at least one cluster name")
		}
		for _, cluster := range rest {
			if err := pki.ValidateClusterName(cluster); err != nil {
				return err
			}
		}
		ca, err := pki.EnsureCA(*dir)
		if err != nil {
			return err
		}
		for _, cluster := range rest {
			issued, err := pki.EnsureAgent(*dir, ca, cluster)
			if err != nil {
				return err
			}
			report(pki.AgentCertFile(cluster), issued)
		}
	default:
		fs.Usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}
