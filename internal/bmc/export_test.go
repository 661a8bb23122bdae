package bmc

// BreakerState exposes a connection's circuit breaker to the tests.
func BreakerState(c BMC) (open, probing bool, failures int) {
	cn := c.(*conn)
	cn.brk.mu.Lock()
	defer cn.brk.mu.Unlock()
	return !cn.brk.openUntil.IsZero(), cn.brk.probing, cn.brk.failures
}
