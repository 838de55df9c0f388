// Package readmetest runs what the README tells a newcomer to run, so that
// the README stays true: its tests extract the commands and files from
// README.md and run them against real in-process brokers.
package readmetest
