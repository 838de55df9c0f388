package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Checker is anything with a leader health check; *streams.Election is one.
type Checker interface {
	// Healthy returns an error when the candidate believes it leads but has
	// not renewed for longer than its renew interval plus tolerance.
	Healthy(tolerance time.Duration) error
}

// HealthHandler serves 200 "ok" while every checker is healthy and 503 with
// the reasons otherwise, in the spirit of client-go's HealthzAdaptor: a
// leader wedged so that it cannot renew shows up in liveness probes.
func HealthHandler(tolerance time.Duration, checkers ...Checker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var errs []error
		for _, c := range checkers {
			if err := c.Healthy(tolerance); err != nil {
				errs = append(errs, err)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := errors.Join(errs...); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
