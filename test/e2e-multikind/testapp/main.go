// Command testapp is the workload of the kind e2e suite: a small HTTP
// server with liveness and readiness endpoints, built into images under the
// names the specs deploy (make e2e-kind loads them into every member), so
// that pods, probes, crash loops and readiness failures on kind are real.
//
// Its behaviour comes from its image's entrypoint, since the specs change
// only an app's image (its tag), never its arguments:
//
//	-mode=serve    answer /, /healthz and /readyz (200)
//	-mode=unready  answer /healthz but fail /readyz (503): never Ready
//	               under a readiness probe (the rollout failure specs)
//	-mode=crash    exit 1 after -crash-after: a crash loop
//	-listen=ADDR   where to serve (default :8080)
//
// Arguments it does not know (those the specs give the containers, such as
// a sidecar's --upstream) are logged and ignored. POST /fail and POST /heal
// switch readiness at run time.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	mode, listen, crashAfter := "serve", ":8080", 2*time.Second
	for _, a := range os.Args[1:] {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "mode":
			mode = value
		case "listen":
			listen = value
		case "crash-after":
			d, err := time.ParseDuration(value)
			if err != nil {
				log.Fatalf("-crash-after=%q: %v", value, err)
			}
			crashAfter = d
		default:
			log.Printf("ignoring argument %q", a)
		}
	}
	var ready atomic.Bool
	switch mode {
	case "serve":
		ready.Store(true)
	case "unready":
	case "crash":
		log.Printf("mode crash: exiting in %v", crashAfter)
		time.AfterFunc(crashAfter, func() {
			log.Print("crashing (mode crash)")
			os.Exit(1)
		})
	default:
		log.Fatalf("-mode=%q: want serve, unready or crash", mode)
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "testapp %s on %s\n", mode, host)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, _ *http.Request) {
		ready.Store(false)
		fmt.Fprintln(w, "readiness now fails")
	})
	mux.HandleFunc("POST /heal", func(w http.ResponseWriter, _ *http.Request) {
		ready.Store(true)
		fmt.Fprintln(w, "readiness now passes")
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("testapp mode %s listening on %s", mode, listen)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
