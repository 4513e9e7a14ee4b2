"""Pure rules of turnkeeper: values, decisions and errors, with no I/O.

Nothing in this package reads a clock, a database, the network or randomness; every
function takes plain values and returns plain values or raises a `DomainError`.
"""
