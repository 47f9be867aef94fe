// Command pause is the sandbox ("pause") container of the Flotilla kind node
// image, preloaded as registry.k8s.io/pause: it holds a pod's namespaces
// open, reaps the zombies of a pod that shares its process namespace, and
// exits on SIGINT or SIGTERM. It is Flotilla's own, built from this module
// so that the node image needs no registry.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (flotilla kind node image)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "shutting down, got signal %v\n", s)
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
