package broker

// InternalUser is the in-process credential's user name, for tests.
const InternalUser = internalUser

// InternalPassword returns the broker's in-process password, for tests that
// check it works nowhere else and is never logged.
func (b *Broker) InternalPassword() string { return b.internal.password }
