package streams

// feed steps m with in, its error classified as the driver does.
func (m *machine) feed(in input) output { return m.step(classified(in)) }
