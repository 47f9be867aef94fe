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
//
// The images have no shell and no coreutils, so the binary also answers to
// the two commands the specs' pod templates run, by the name it is called
// with (testapp-images.sh links them):
//
//	/bin/true            exit 0 (an init container that has nothing to do)
//	/bin/check --ready   exit 0 when the app in this container answers
//	                     GET http://127.0.0.1:8080/readyz with 200 (an exec
//	                     readiness probe), else 1
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "true":
		os.Exit(0)
	case "check":
		os.Exit(check("http://127.0.0.1:8080/readyz"))
	}
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

// check is /bin/check: 0 when url answers 200 within two seconds, else 1
// with the reason on stderr (which the kubelet records in the probe's
// event).
func check(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "check: %s answered %s\n", url, resp.Status)
		return 1
	}
	return 0
}
