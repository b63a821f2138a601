// The tests that import this support module also get the LoadGate, the own-threads trait and the
// scheduler clock.
@_exported import TestScheduling
