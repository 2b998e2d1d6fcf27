"""The pure core: no I/O, no clock (time is an argument), no randomness."""
