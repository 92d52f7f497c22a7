"""Fakes of vendor libraries (same names and signatures as the real ones)
for tests that run without a GPU."""
