"""Shared-memory rings: the numpy mirror of include/graphsignal/probe.h's
layout, attach/validate/drain on the reader side, and discovery."""
