// Command sleeper prints "ready" and sleeps until killed: a process for
// TestResidentExecutable to read the resident pages of.
package main

import (
	"fmt"
	"net/http"
	"time"
)

func main() {
	// net/http's start-up runs, so its package holds resident pages.
	_ = http.DefaultClient
	fmt.Println("ready")
	time.Sleep(time.Hour)
}
