// Package readmetest runs what the README tells a newcomer to run, so that
// the README stays true: its tests extract the commands and files from
// README.md, and from the secure setup in docs/security.md that it links to,
// and run them against real in-process brokers.
package readmetest
