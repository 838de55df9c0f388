// Package clustertest holds the end-to-end test of elections on a
// three-node broker cluster whose election bucket leader is stopped and
// restarted. It has no code of its own: run it with
//
//	go test -race ./internal/clustertest
package clustertest
