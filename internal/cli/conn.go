package cli

// connFlags are the NATS connection flags, named as the NATS CLI names them.
type connFlags struct {
	config  string
	server  string
	creds   string
	context string
}
